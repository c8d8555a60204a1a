// The libsvm / SVMlight text format, read into a SparseDataset.
//
// One sample per line:
//   <label> <index>:<value> <index>:<value> ...   # optional comment
// label    a number (+1/-1, 0/1, class ids; regression targets are read too)
// index    a positive integer, 1-based, strictly increasing along the line
// value    a finite number; an entry with value 0 is kept as written
// Fields are separated by spaces or tabs; '#' starts a comment that runs to the end of the line;
// blank and comment-only lines are skipped; a trailing '\r' (CRLF files) is ignored. Feature j of
// the file is column j - 1 of the data set. Files may be raw or gzip-compressed (InputFile).
//
// Bad input is a one-line DataError naming the file, the line and what is wrong, e.g.
//   libsvm file a1a.txt, line 17: index 5 after 9: indices must increase
// The file is read whole (its size bounds the memory), then parsed in one pass: cost O(bytes).
// The reader's memory grows with the non-zeros, not with the indices; but a model over the data
// set holds one weight per feature, so an index >= 50,000,000 is logged as a warning naming the
// file, line and index, and refused (DataError, same place) when 4 bytes per feature exceed the
// memory available (base/memory_info.h).
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/data/sparse_dataset.h"

namespace dtrain::data {

// Reads `path`. The data set has d = max(largest index in the file, min_features) features (pass
// the training set's d when reading its test set). DataError for a missing or unreadable file, a
// malformed line, an index above 2^31 - 1, and a file without any sample.
SparseDataset read_libsvm(const std::string& path, std::int64_t min_features = 0);

// The same from text in memory; `source` names it in messages (a file name).
SparseDataset parse_libsvm(std::string_view text, const std::string& source,
                           std::int64_t min_features = 0);

}  // namespace dtrain::data
