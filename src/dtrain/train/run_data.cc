#include "dtrain/train/run_data.h"

namespace dtrain::train {

data::DataSpec data_spec(const DataSection& config) {
  data::DataSpec spec;
  spec.dataset = config.dataset;
  spec.path = config.path;
  spec.test_path = config.test_path;
  spec.sparse_features = config.sparse_features;
  spec.sparse_nonzeros = config.sparse_nonzeros;
  spec.sparse_label_noise = config.sparse_label_noise;
  spec.synthetic_samples = config.synthetic_samples;
  spec.synthetic_test_samples = config.synthetic_test_samples;
  spec.synthetic_classes = config.synthetic_classes;
  spec.synthetic_shape = config.synthetic_shape;
  spec.synthetic_noise = config.synthetic_noise;
  spec.synthetic_seed = config.synthetic_seed;
  spec.block = config.block;
  spec.text_windows = config.text_windows;
  spec.text_test_windows = config.text_test_windows;
  spec.text_holdout = config.text_holdout;
  spec.limit_train = config.limit_train;
  spec.limit_test = config.limit_test;
  return spec;
}

RunData load_run_data(const DataSection& config) { return data::load_dense(data_spec(config)); }

}  // namespace dtrain::train
