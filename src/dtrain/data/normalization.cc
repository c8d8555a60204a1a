#include "dtrain/data/normalization.h"

#include <array>
#include <cmath>

#include "dtrain/base/error.h"

namespace dtrain::data {

Normalization standard_normalization(const std::string& dataset_name) {
  if (dataset_name == "fashion-mnist") return {{0.2860f}, {0.3530f}};
  if (dataset_name == "mnist") return {{0.1307f}, {0.3081f}};
  if (dataset_name == "cifar10") {
    return {{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};
  }
  throw ConfigError(fmt::format(
      "no standard normalisation for data set '{}': known are fashion-mnist, mnist, cifar10; pass "
      "an explicit Normalization for other data",
      dataset_name));
}

void check_normalization(const Normalization& norm, std::int64_t channels, std::string_view where) {
  if (static_cast<std::int64_t>(norm.mean.size()) != channels ||
      static_cast<std::int64_t>(norm.std.size()) != channels) {
    throw ConfigError(fmt::format(
        "normalisation for {} has {} means and {} stds, but the images have {} channels; give one "
        "of each per channel",
        where, norm.mean.size(), norm.std.size(), channels));
  }
  for (std::size_t c = 0; c < norm.std.size(); ++c) {
    if (!std::isfinite(norm.mean[c]) || !std::isfinite(norm.std[c]) || !(norm.std[c] > 0.0f)) {
      throw ConfigError(fmt::format(
          "normalisation for {}: channel {} has mean {} and std {}; need finite values and std > 0",
          where, c, norm.mean[c], norm.std[c]));
    }
  }
}

void decode_pixels(const std::uint8_t* records, std::int64_t record_stride, std::int64_t samples,
                   std::int64_t channels, std::int64_t plane, const Normalization& norm,
                   float* out) {
  DTRAIN_CHECK_GE(record_stride, channels * plane);
  DTRAIN_CHECK_EQ(static_cast<std::int64_t>(norm.mean.size()), channels);
  DTRAIN_CHECK_EQ(static_cast<std::int64_t>(norm.std.size()), channels);
  std::vector<std::array<float, 256>> tables(static_cast<std::size_t>(channels));
  for (std::size_t c = 0; c < tables.size(); ++c) {
    const double mean = norm.mean[c];
    const double stddev = norm.std[c];
    for (std::size_t v = 0; v < 256; ++v) {
      tables[c][v] = static_cast<float>((static_cast<double>(v) / 255.0 - mean) / stddev);
    }
  }
  // Sample-major, so that the records and the output are each read or written once, in order.
  for (std::int64_t n = 0; n < samples; ++n) {
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::array<float, 256>& table = tables[static_cast<std::size_t>(c)];
      const std::uint8_t* source = records + n * record_stride + c * plane;
      float* target = out + (n * channels + c) * plane;
      for (std::int64_t p = 0; p < plane; ++p) target[p] = table[source[p]];
    }
  }
}

}  // namespace dtrain::data
