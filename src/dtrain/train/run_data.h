// The training and test sets a run's [data] section names, loaded once before training.
#pragma once

#include <cstdint>

#include "dtrain/data/dataset.h"
#include "dtrain/train/config.h"

namespace dtrain::train {

struct RunData {
  data::Dataset train;
  data::Dataset test;
};

// fashion-mnist / mnist: the IDX files in data.path; cifar10: the binary batches in data.path;
// synthetic: one draw of synthetic_samples + synthetic_test_samples split into train (the first
// synthetic_samples) and test (the rest), so both share the class means. Then limit_train /
// limit_test keep the first N samples. DataError from the readers names the missing or bad file.
RunData load_run_data(const DataSection& config);

// The first n samples of `dataset` (a copy), or all of it when n == 0 or n >= size.
data::Dataset take_first(const data::Dataset& dataset, std::int64_t n);

}  // namespace dtrain::train
