// IDX files (the format of MNIST and Fashion-MNIST) and the data sets stored in them.
//
// An IDX file is a big-endian header followed by the values, row-major:
//   bytes 0-1  0x0000
//   byte  2    type: 0x08 uint8 (the only one dtrain reads), 0x09 int8, 0x0B int16, 0x0C int32,
//              0x0D float32, 0x0E float64
//   byte  3    number of dimensions d
//   d x int32  the dimensions
// so images are magic 0x00000803 then N, H, W and labels 0x00000801 then N. Files may be raw or
// gzip-compressed (the Debian package ships .gz).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/data/normalization.h"

namespace dtrain::data {

struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> values;  // product(dims) values, row-major
};

// Reads a uint8 IDX file, raw or gzip. expected_dims > 0 demands that many dimensions (magic
// 0x00000800 + expected_dims). DataError for a missing file, a wrong magic number (with the value
// read and the one expected), a type byte other than uint8, a file shorter than its header says
// (expected N bytes of data after the header, got M), trailing bytes after the data, and a corrupt
// gzip stream. The header's claimed size is checked against what the file can hold before
// anything is allocated.
IdxArray read_idx(const std::string& path, int expected_dims = 0);

// Reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte, raw or with .gz (also the
// `train-images.idx3-ubyte` spelling of some MNIST copies): images (N, 1, H, W) normalised with
// standard_normalization(name) or `norm`, and N labels in [0, 10). Works for MNIST and
// Fashion-MNIST alike; `name` becomes Dataset::name. DataError for a missing directory or file,
// the cases of read_idx, an image/label count mismatch and a label out of range (its index and
// value).
Dataset load_idx_dataset(const std::string& dir, Split split, const std::string& name);
Dataset load_idx_dataset(const std::string& dir, Split split, const std::string& name,
                         const Normalization& norm);

}  // namespace dtrain::data
