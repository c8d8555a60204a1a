#include "dtrain/data/synthetic.h"

#include <cmath>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"

namespace dtrain::data {
namespace {

// rng_stream purposes of the synthetic data set.
constexpr std::uint64_t kClassMeanPurpose = 0x5E7A'0001;
constexpr std::uint64_t kSamplePurpose = 0x5E7A'0002;

void check_config(const SyntheticConfig& config) {
  if (config.samples < 1) {
    throw ConfigError(fmt::format("synthetic data: samples must be >= 1, got {}", config.samples));
  }
  if (config.num_classes < 2) {
    throw ConfigError(
        fmt::format("synthetic data: num_classes must be >= 2, got {}", config.num_classes));
  }
  bool positive = config.sample_shape.size() == 3;
  for (std::int64_t d : config.sample_shape) positive = positive && d > 0;
  if (!positive) {
    throw ConfigError(
        fmt::format("synthetic data: sample_shape must be three positive sizes {{C, H, W}}, got {}",
                    tensor::shape_str(config.sample_shape)));
  }
  if (!std::isfinite(config.noise) || config.noise < 0.0f) {
    throw ConfigError(
        fmt::format("synthetic data: noise must be finite and >= 0, got {}", config.noise));
  }
}

}  // namespace

tensor::Tensor synthetic_class_means(const SyntheticConfig& config) {
  check_config(config);
  const tensor::Shape& s = config.sample_shape;
  tensor::Tensor means = tensor::Tensor::empty({config.num_classes, s[0], s[1], s[2]});
  const std::int64_t numel = tensor::shape_numel(s);
  for (std::int64_t k = 0; k < config.num_classes; ++k) {
    Rng rng(config.seed, rng_stream(kClassMeanPurpose, static_cast<std::uint64_t>(k)));
    float* mean = means.data() + k * numel;
    for (std::int64_t j = 0; j < numel; ++j) mean[j] = rng.normal();
  }
  return means;
}

Dataset make_synthetic(const SyntheticConfig& config) {
  const tensor::Tensor means = synthetic_class_means(config);
  const tensor::Shape& s = config.sample_shape;
  const std::int64_t numel = tensor::shape_numel(s);
  Dataset data;
  data.name = "synthetic";
  data.num_classes = config.num_classes;
  data.images = tensor::Tensor::empty({config.samples, s[0], s[1], s[2]});
  data.labels.resize(static_cast<std::size_t>(config.samples));
  for (std::int64_t i = 0; i < config.samples; ++i) {
    Rng rng(config.seed, rng_stream(kSamplePurpose, static_cast<std::uint64_t>(i)));
    const auto label =
        static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(config.num_classes)));
    data.labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(label);
    const float* mean = means.data() + label * numel;
    float* x = data.images.data() + i * numel;
    for (std::int64_t j = 0; j < numel; ++j) x[j] = mean[j] + config.noise * rng.normal();
  }
  return data;
}

}  // namespace dtrain::data
