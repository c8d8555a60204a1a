// Byte-level text for language models (data.dataset = "text"): a file or a folder of files read as
// bytes (vocabulary 256), cut into a training and a held-out split, and windows of `block` + 1
// bytes drawn from each split at seeded random offsets.
//
// A window is one sample: its first `block` bytes are the input (stored as floats, like every
// other data set's samples, (N, block)), and its last `block` bytes the labels, one per position
// (the next byte; Dataset::labels_per_sample = block). The loss is then the mean cross-entropy over
// N x block positions: nats per byte.
//
// The windows are drawn once, so an epoch is one pass over a fixed set of windows in a fresh
// shuffled order (the sampler's); PyTorch's charlm peer (../shared/peers/scripts/train_charlm.py)
// draws fresh offsets for every batch instead. With as many windows as the split has bytes / block
// the two see the same amount of text per epoch; the difference is which offsets repeat.
//
// Memory: N x block x (4 B input + 4 B label); the default for Debian's fortunes corpus (2.6 MB)
// is 18,400 windows of 128, 19 MB.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/data/load.h"

namespace dtrain::data {

struct TextSpec {
  std::string path;                // a file, or a folder (see read_text_corpus)
  std::int64_t block = 128;        // bytes of input per window
  std::int64_t train_windows = 0;  // 0: the training split's bytes / block
  std::int64_t test_windows = 256;
  double holdout = 0.1;    // the last fraction of the bytes is the held-out split
  std::uint64_t seed = 1;  // offsets: stream 0 for training, 1 for the held-out split
};

// The bytes of `path`: the file itself, or every regular file of the folder in sorted name order,
// concatenated. In a folder, files without an extension are taken when there are any (Debian's
// fortunes folder keeps its text there, beside binary .dat indexes and .u8 copies), else every
// regular file. DataError naming the path for a missing, unreadable or empty corpus.
std::string read_text_corpus(const std::string& path);

// The two splits of windows, as described above. DataError when a split is shorter than one
// window (block + 1 bytes), naming both lengths.
DenseSplits make_text_windows(const std::string& bytes, const TextSpec& spec);

}  // namespace dtrain::data
