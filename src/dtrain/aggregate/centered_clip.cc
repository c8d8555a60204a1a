#include "dtrain/aggregate/centered_clip.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dtrain/base/error.h"

namespace dtrain::aggregate {

CenteredClip::CenteredClip(std::optional<double> tau, int iterations)
    : tau_(tau), iterations_(iterations) {
  DTRAIN_CHECK((!tau || (*tau > 0 && std::isfinite(*tau))) && iterations >= 1,
               "centered clipping's tau {} or iterations {}", tau.value_or(-1.0), iterations);
}

std::string CenteredClip::name() const {
  const std::string tau = tau_ ? fmt::format("{}", *tau_) : std::string("auto");
  return iterations_ == 1 ? fmt::format("cclip:{}", tau)
                          : fmt::format("cclip:{}:{}", tau, iterations_);
}

void CenteredClip::load_state(std::span<const double> values) {
  center_.assign(values.begin(), values.end());
}

void CenteredClip::set_center(std::span<const float> center) {
  center_.assign(center.begin(), center.end());
}

void CenteredClip::run(Inputs inputs, std::int64_t d, float* out) {
  const auto length = static_cast<std::size_t>(d);
  if (center_.empty()) {
    center_.assign(length, 0.0);
  } else if (center_.size() != length) {
    throw ShapeError(fmt::format("aggregator '{}': inputs of length {}, but the centre has {}",
                                 name(), d, center_.size()));
  }
  const double n = static_cast<double>(inputs.size());
  scale_.resize(inputs.size());
  distance_.resize(inputs.size());
  for (int iteration = 0; iteration < iterations_; ++iteration) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float* x = inputs[i];
      double norm2 = 0.0;
      for (std::size_t k = 0; k < length; ++k) {
        const double z = x[k] - center_[k];
        norm2 += z * z;
      }
      const double norm = std::sqrt(norm2);
      distance_[i] = std::isfinite(norm) ? norm : std::numeric_limits<double>::infinity();
    }
    double tau = tau_.value_or(0.0);
    if (!tau_) {
      // The lower median of the distances, on a copy (scale_ is free until it is filled below).
      scale_ = distance_;
      const auto middle = scale_.begin() + static_cast<std::ptrdiff_t>((scale_.size() - 1) / 2);
      std::nth_element(scale_.begin(), middle, scale_.end());
      tau = *middle;
    }
    last_tau_ = tau;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const double norm = distance_[i];
      scale_[i] = !std::isfinite(norm) ? 0.0 : (norm <= tau ? 1.0 : tau / norm);
    }
    pull_.assign(length, 0.0);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float* x = inputs[i];
      const double scale = scale_[i];
      if (scale == 0.0) continue;
      for (std::size_t k = 0; k < length; ++k) pull_[k] += scale * (x[k] - center_[k]);
    }
    for (std::size_t k = 0; k < length; ++k) center_[k] += pull_[k] / n;
  }
  for (std::size_t k = 0; k < length; ++k) out[k] = static_cast<float>(center_[k]);
}

}  // namespace dtrain::aggregate
