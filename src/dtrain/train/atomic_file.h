// Files that are either wholly old or wholly new: checkpoints, the `latest` pointer, summary.json.
//
// A crash or a full disk in the middle of a plain overwrite leaves a half-written file where a good
// one was. Writing to `<path>.tmp`, fsync'ing it, renaming it over `<path>` (atomic on POSIX) and
// fsync'ing the folder means a reader, even after a power cut, sees the previous complete file or
// the new complete file, never a mix.
#pragma once

#include <string>
#include <string_view>

namespace dtrain::train {

// Writes `bytes` to `path` atomically as described above. On failure the temporary file is
// removed, `path` is left as it was, and dtrain::Error names the path and the system's reason.
void write_file_atomically(const std::string& path, std::string_view bytes);

// The whole content of `path`; dtrain::Error naming the path and the reason when it cannot be read.
std::string read_whole_file(const std::string& path);

}  // namespace dtrain::train
