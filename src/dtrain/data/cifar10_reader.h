// CIFAR-10, binary version (cifar-10-binary.tar.gz, unpacked to cifar-10-batches-bin/).
//
// Each file is a run of 3073-byte records: 1 label byte in [0, 10), then 3072 pixel bytes, the
// 1024 red, then 1024 green, then 1024 blue values of a 32 x 32 image in row-major order, which is
// already the (C, H, W) layout. data_batch_1..5.bin hold 10000 training images each, test_batch.bin
// the 10000 test images.
#pragma once

#include <string>

#include "dtrain/data/dataset.h"
#include "dtrain/data/normalization.h"

namespace dtrain::data {

// Loads <dir>/data_batch_{1..5}.bin (train) or <dir>/test_batch.bin (test), each raw or with .gz;
// dir may also be the folder that holds cifar-10-batches-bin/. Images (N, 3, 32, 32) normalised
// per channel with standard_normalization("cifar10") or `norm`. DataError for a missing directory
// or file, a file whose size is not a multiple of 3073, a label out of range (file, record, value)
// and a corrupt gzip stream.
Dataset load_cifar10(const std::string& dir, Split split);
Dataset load_cifar10(const std::string& dir, Split split, const Normalization& norm);

}  // namespace dtrain::data
