#include "dtrain/train/run_data.h"

#include "dtrain/base/error.h"
#include "dtrain/data/cifar10_reader.h"
#include "dtrain/data/idx_reader.h"
#include "dtrain/data/synthetic.h"

namespace dtrain::train {
namespace {

// Samples [begin, end) of `dataset`, copied so that the result owns its storage.
data::Dataset take_range(const data::Dataset& dataset, std::int64_t begin, std::int64_t end) {
  data::Dataset out;
  out.name = dataset.name;
  out.num_classes = dataset.num_classes;
  out.images = dataset.images.slice(begin, end).clone();
  out.labels.assign(dataset.labels.begin() + begin, dataset.labels.begin() + end);
  return out;
}

}  // namespace

data::Dataset take_first(const data::Dataset& dataset, std::int64_t n) {
  if (n <= 0 || n >= dataset.size()) return dataset;
  return take_range(dataset, 0, n);
}

RunData load_run_data(const DataSection& config) {
  RunData run;
  if (config.dataset == "synthetic") {
    data::SyntheticConfig synthetic;
    synthetic.samples = config.synthetic_samples + config.synthetic_test_samples;
    synthetic.num_classes = config.synthetic_classes;
    synthetic.sample_shape = config.synthetic_shape;
    synthetic.noise = static_cast<float>(config.synthetic_noise);
    synthetic.seed = static_cast<std::uint64_t>(config.synthetic_seed);
    const data::Dataset all = data::make_synthetic(synthetic);
    run.train = take_range(all, 0, config.synthetic_samples);
    run.test = take_range(all, config.synthetic_samples, all.size());
  } else if (config.dataset == "cifar10") {
    run.train = data::load_cifar10(config.path, data::Split::kTrain);
    run.test = data::load_cifar10(config.path, data::Split::kTest);
  } else if (config.dataset == "fashion-mnist" || config.dataset == "mnist") {
    run.train = data::load_idx_dataset(config.path, data::Split::kTrain, config.dataset);
    run.test = data::load_idx_dataset(config.path, data::Split::kTest, config.dataset);
  } else {
    throw ConfigError(fmt::format(
        "config key 'data.dataset' = \"{}\" is not a data set; accepted: fashion-mnist, mnist, "
        "cifar10, synthetic",
        config.dataset));
  }
  run.train = take_first(run.train, config.limit_train);
  run.test = take_first(run.test, config.limit_test);
  return run;
}

}  // namespace dtrain::train
