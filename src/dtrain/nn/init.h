// Weight initialisation: which distribution a layer's weights start from.
//
// The scale matters more than the shape of the distribution: too small and the signal (and the
// gradient) shrinks layer by layer, too large and it explodes. Xavier/Glorot keeps the variance of
// activations and gradients equal across a layer for linear/tanh units, He/Kaiming compensates for
// ReLU zeroing half of its inputs. The first three are normal distributions with mean 0 and zero
// biases; "uniform" is PyTorch's default for nn.Linear and nn.Conv2d, biases included, so that a
// recipe tuned in PyTorch (learning rate, momentum) behaves the same here:
//   normal:  std = sigma
//   xavier:  std = sqrt(2 / (fan_in + fan_out))   (Glorot & Bengio, 2010)
//   he:      std = sqrt(2 / fan_in)                (He et al., 2015)
//   uniform: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases (std = 1/sqrt(3 fan_in);
//            PyTorch's kaiming_uniform_ with a = sqrt(5))
// For a Linear(in -> out) fan_in = in, fan_out = out; for a convolution fan_in = C_in * kH * kW and
// fan_out = C_out * kH * kW.
#pragma once

#include <cstdint>
#include <string_view>

#include "dtrain/base/rng.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::nn {

enum class InitKind { kNormal, kXavier, kHe, kUniform };

// "normal" | "xavier" | "he" | "uniform"; anything else is a ConfigError naming model.init and the
// accepted names.
InitKind parse_init(std::string_view name);
std::string_view init_name(InitKind kind);

// The standard deviation the formulas above give; fan_in, fan_out > 0 and sigma >= 0.
float init_std(InitKind kind, std::int64_t fan_in, std::int64_t fan_out, float sigma);

// Fills the contiguous tensor w with N(0, init_std(...)^2) draws (U(-b, b) for kUniform) from rng,
// in element order, so the same rng state always gives the same weights. Cost: numel draws.
void init_weights(tensor::Tensor& w, std::int64_t fan_in, std::int64_t fan_out, InitKind kind,
                  float sigma, Rng& rng);

// Biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for kUniform, zero otherwise.
void init_bias(tensor::Tensor& b, std::int64_t fan_in, InitKind kind, Rng& rng);

}  // namespace dtrain::nn
