// Reproducible inputs for a model's forward and backward in tests (tests only): a micro-batch for
// its sample shape, a random tensor of a shape, and the model's gradients as a vector.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/nn/model.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::testing {

// A micro-batch of `batch` samples from Philox stream `stream`: token ids below 11 for a language
// model (`name` "gpt"), standard normal values otherwise.
inline tensor::Tensor model_input(const nn::Model& model, const std::string& name,
                                  std::int64_t batch, std::uint64_t stream) {
  tensor::Shape shape{batch};
  shape.insert(shape.end(), model.sample_shape().begin(), model.sample_shape().end());
  tensor::Tensor x = tensor::Tensor::zeros(shape);
  Rng rng(99, stream);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    x.data()[i] = name == "gpt" ? static_cast<float>(rng.next_u32() % 11) : rng.normal();
  }
  return x;
}

// Standard normal values of `shape` from Philox stream `stream`.
inline tensor::Tensor random_normal(const tensor::Shape& shape, std::uint64_t stream) {
  tensor::Tensor t = tensor::Tensor::zeros(shape);
  Rng rng(7, stream);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = rng.normal();
  return t;
}

inline std::vector<float> grads_of(const nn::Model& model) {
  const nn::ParamStore& store = model.store();
  return {store.grads(), store.grads() + store.num_params()};
}

}  // namespace dtrain::testing
