#include "dtrain/data/load.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"
#include "dtrain/data/cifar10_reader.h"
#include "dtrain/data/idx_reader.h"
#include "dtrain/data/libsvm_reader.h"
#include "dtrain/data/sparse_synthetic.h"
#include "dtrain/data/synthetic.h"
#include "dtrain/data/text_corpus.h"

namespace dtrain::data {
namespace {

// Samples [begin, end) of `dataset`, copied so that the result owns its storage.
Dataset take_range(const Dataset& dataset, std::int64_t begin, std::int64_t end) {
  Dataset out;
  out.name = dataset.name;
  out.num_classes = dataset.num_classes;
  out.labels_per_sample = dataset.labels_per_sample;
  out.images = dataset.images.slice(begin, end).clone();
  const std::int64_t per_sample = dataset.labels_per_sample;
  out.labels.assign(dataset.labels.begin() + begin * per_sample,
                    dataset.labels.begin() + end * per_sample);
  return out;
}

}  // namespace

bool is_sparse_dataset(const std::string& name) {
  return name == "libsvm" || name == "sparse-synthetic";
}

Dataset take_first(const Dataset& dataset, std::int64_t n) {
  if (n <= 0 || n >= dataset.size()) return dataset;
  return take_range(dataset, 0, n);
}

DenseSplits load_dense(const DataSpec& spec) {
  DenseSplits out;
  if (spec.dataset == "synthetic") {
    SyntheticConfig synthetic;
    synthetic.samples = spec.synthetic_samples + spec.synthetic_test_samples;
    synthetic.num_classes = spec.synthetic_classes;
    synthetic.sample_shape = spec.synthetic_shape;
    synthetic.noise = static_cast<float>(spec.synthetic_noise);
    synthetic.seed = static_cast<std::uint64_t>(spec.synthetic_seed);
    const Dataset all = make_synthetic(synthetic);
    out.train = take_range(all, 0, spec.synthetic_samples);
    out.test = take_range(all, spec.synthetic_samples, all.size());
  } else if (spec.dataset == "cifar10") {
    out.train = load_cifar10(spec.path, Split::kTrain);
    out.test = load_cifar10(spec.path, Split::kTest);
  } else if (spec.dataset == "fashion-mnist" || spec.dataset == "mnist") {
    out.train = load_idx_dataset(spec.path, Split::kTrain, spec.dataset);
    out.test = load_idx_dataset(spec.path, Split::kTest, spec.dataset);
  } else if (spec.dataset == "text") {
    TextSpec text;
    text.path = spec.path;
    text.block = spec.block;
    text.train_windows = spec.text_windows;
    text.test_windows = spec.text_test_windows;
    text.holdout = spec.text_holdout;
    text.seed = static_cast<std::uint64_t>(spec.synthetic_seed);
    out = make_text_windows(read_text_corpus(spec.path), text);
  } else {
    throw ConfigError(fmt::format(
        "config key 'data.dataset' = \"{}\" is not a data set; accepted: fashion-mnist, mnist, "
        "cifar10, synthetic, text",
        spec.dataset));
  }
  out.train = take_first(out.train, spec.limit_train);
  out.test = take_first(out.test, spec.limit_test);
  return out;
}

SparseSplits load_sparse(const DataSpec& spec) {
  SparseSplits out;
  if (spec.dataset == "libsvm") {
    out.train = read_libsvm(spec.path);
    if (!spec.test_path.empty()) {
      out.test = read_libsvm(spec.test_path, out.train.num_features);
      // The test set first: its labels map by the training set's values as read.
      make_binary_labels(*out.test, out.train);
    }
    make_binary_labels(out.train);
  } else if (spec.dataset == "sparse-synthetic") {
    SparseSyntheticConfig synthetic;
    synthetic.samples = spec.synthetic_samples;
    synthetic.features = spec.sparse_features;
    synthetic.nonzeros = spec.sparse_nonzeros;
    synthetic.label_noise = spec.sparse_label_noise;
    synthetic.seed = static_cast<std::uint64_t>(spec.synthetic_seed);
    out.train = make_sparse_synthetic(synthetic);
    synthetic.samples = spec.synthetic_test_samples;
    out.test = make_sparse_synthetic(synthetic, spec.synthetic_samples);  // the next ones
  } else {
    throw ConfigError(fmt::format(
        "config key 'data.dataset' = \"{}\" is not a sparse data set; accepted: libsvm, "
        "sparse-synthetic",
        spec.dataset));
  }
  out.train = take_first_rows(out.train, spec.limit_train);
  if (out.test) out.test = take_first_rows(*out.test, spec.limit_test);
  return out;
}

}  // namespace dtrain::data
