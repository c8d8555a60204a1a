// The checkpoints folder of a run: checkpoint files and `latest`, a one-line file naming the
// newest checkpoint written.
//
// Names come from a checkpoint's content: at an epoch boundary (sampler_position == 0)
// epoch-<sampler_epoch>.ckpt, inside an epoch epoch-<sampler_epoch>-step-<global_step>.ckpt, where
// sampler_epoch counts completed epochs and global_step optimizer steps. Files are ordered by
// (epoch, has a step, step): epoch-2 < epoch-2-step-150 < epoch-2-step-300 < epoch-3.
//
// Order of a save: write the checkpoint file atomically (temp file, fsync, rename), then rewrite
// `latest` atomically, then delete the oldest files beyond the `keep` newest. A crash or a full
// disk at any point leaves every complete checkpoint in place, and a resume takes the newest
// checkpoint that verifies (newest_good), so a damaged file or a stale `latest` costs at most the
// steps since the previous good checkpoint. See docs/FAULTS.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/train/checkpoint.h"

namespace dtrain::train {

// A checkpoint that was read and verified, and the file it came from.
struct VerifiedCheckpoint {
  std::string path;
  Checkpoint checkpoint;
};

class CheckpointDir {
 public:
  // keep = 0 keeps every checkpoint. The folder is created on the first save.
  CheckpointDir(std::string folder, std::int64_t keep);

  // The file name `checkpoint` is saved under: epoch-N.ckpt or epoch-N-step-S.ckpt (see above).
  static std::string file_name(const Checkpoint& checkpoint);

  // Saves `checkpoint` under file_name(checkpoint), points `latest` at it, prunes to `keep` files;
  // returns its path. CheckpointError when the checkpoint file itself cannot be written (the
  // earlier files are left intact and no temp file remains). A `latest` that cannot be rewritten
  // only warns: the checkpoint is complete, and newest_good finds it without `latest`.
  // A write that fails for lack of space (ENOSPC, EDQUOT) with keep > 0 removes the checkpoints
  // older than the newest one that verifies (never that one) and tries once more, with a warning
  // naming what it removed (the first time only): the kept files would otherwise fill the disk
  // for good.
  std::string save(const Checkpoint& checkpoint);

  // How save writes a file: write_file_atomically, or a test's stand-in (a full disk).
  using FileWriter = std::function<void(const std::string& path, std::string_view bytes)>;
  void set_file_writer_for_test(FileWriter writer) { writer_ = std::move(writer); }

  // The newest checkpoint that reads and verifies. `latest` is tried first; when it is missing,
  // unreadable, names a missing or damaged file, or names an older file than the newest complete
  // one, the files are tried newest first, with one warning per file passed over. CheckpointError
  // naming the folder and each file's defect when none verifies (or there is none). `keep`: as
  // read_checkpoint's.
  VerifiedCheckpoint newest_good(Keep keep = Keep::kAll) const;

  // Whether the folder holds any checkpoint file or a `latest` (good or not).
  bool has_any() const;

  // Whether every checkpoint file here comes before `checkpoint` in the order above (true when
  // there is none): decided from the names, without reading a file.
  bool is_older_than(const Checkpoint& checkpoint) const;

  // The path `latest` names, unverified; CheckpointError when the folder has no `latest` or it
  // names a file that is missing or not a checkpoint name. Resuming should use newest_good.
  std::string latest_path() const;

  // Paths of the checkpoint files present, oldest first in the order above.
  std::vector<std::string> list() const;

  const std::string& folder() const { return folder_; }

 private:
  // The files older than the newest checkpoint that verifies (other than `keep_path`), oldest
  // first, and that checkpoint's path; empty when none verifies.
  std::pair<std::vector<std::string>, std::string> older_than_newest_complete(
      const std::string& keep_path) const;

  std::string folder_;
  std::int64_t keep_;
  FileWriter writer_;
  bool said_no_space_ = false;  // the warning of a save that made room, once per folder object
};

}  // namespace dtrain::train
