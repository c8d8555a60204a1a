// sign (sign_codec.h): the scale is mean |x| and element i decodes to +-scale by x_i's sign bit.
#include "dtrain/compress/sign_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "random_values.h"

namespace dtrain::compress {
namespace {

TEST(SignCodec, SendsTheMeanMagnitudeAndTheSigns) {
  SignCodec codec;
  for (std::int64_t n : {1, 7, 9, 1000, 1000003}) {
    std::vector<float> x = testing::random_values(n, 6);
    x.at(0) = -0.0f;  // the sign bit counts: -scale
    double mean = 0.0;
    for (float v : x) mean += std::fabs(v);
    mean /= static_cast<double>(n);
    ASSERT_EQ(codec.encoded_bytes(n), static_cast<std::size_t>(4 + (n + 7) / 8));
    std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
    codec.encode(x.data(), n, payload.data(), 0);
    float scale;
    std::memcpy(&scale, payload.data(), 4);
    EXPECT_NEAR(scale, mean, 1e-6 * mean) << "n " << n;
    std::vector<float> y(x.size());
    codec.decode(payload.data(), n, y.data(), 0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(y[i], std::signbit(x[i]) ? -scale : scale) << "n " << n << " element " << i;
    }
  }
}

}  // namespace
}  // namespace dtrain::compress
