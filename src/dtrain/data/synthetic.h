// A synthetic classification data set with a known generating rule, for tests and for runs that
// must not depend on files.
//
// Rule: class k has a mean image m_k whose elements are i.i.d. N(0, 1); sample i draws its label
// y_i uniformly from [0, num_classes) and its image x_i = m_{y_i} + noise * e_i with e_i i.i.d.
// N(0, 1). Two class means lie about sqrt(2D) apart (D = C*H*W), and the nearest class mean --
// the Bayes classifier here -- confuses a pair with probability Phi(-|m_a - m_b| / (2 noise)),
// about Phi(-sqrt(D/2) / noise): near perfect for D = 64 and noise 0.5 (the default), one error in
// six per pair at noise = sqrt(D/2). Learnable, with a difficulty knob.
//
// Every class mean and every sample comes from its own counter-based stream (base/rng.h) keyed by
// seed, so the data are a pure function of the config and sample i does not depend on `samples`
// (the first 100 samples of a 1000-sample set are the 100-sample set).
#pragma once

#include <cstdint>

#include "dtrain/data/dataset.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::data {

struct SyntheticConfig {
  std::int64_t samples = 1024;
  std::int64_t num_classes = 10;
  tensor::Shape sample_shape{1, 8, 8};  // {C, H, W}
  float noise = 0.5f;                   // standard deviation around the class mean
  std::uint64_t seed = 0;
};

// The data set above, named "synthetic", already on the scale of normalised data (so no
// Normalization applies). ConfigError for samples < 1, num_classes < 2, a sample_shape that is not
// three positive sizes, or a noise that is negative or not finite.
Dataset make_synthetic(const SyntheticConfig& config);

// The class means m_k, (num_classes, C, H, W): what a perfect model would learn (for tests).
tensor::Tensor synthetic_class_means(const SyntheticConfig& config);

}  // namespace dtrain::data
