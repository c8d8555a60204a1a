// tensor/elementwise.h against the scalar definitions, bit for bit: lengths around the vector width
// (0, 1, 15, 16, 17, 100), out-of-place and in place, zeros and negative zeros at the ReLU's kink.
#include "dtrain/tensor/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "random_values.h"

namespace dtrain::tensor {
namespace {

using dtrain::testing::random_values;

std::vector<float> with_kinks(std::int64_t n, std::uint64_t seed) {
  std::vector<float> v = random_values(n, seed);
  for (std::size_t i = 0; i < v.size(); i += 5) v[i] = i % 2 == 0 ? 0.0f : -0.0f;
  return v;
}

TEST(Elementwise, MatchesTheScalarDefinitionsInAndOutOfPlace) {
  for (const std::int64_t n : {0, 1, 15, 16, 17, 100}) {
    SCOPED_TRACE(n);
    const auto a = with_kinks(n, 1 + static_cast<std::uint64_t>(n));
    const auto b = with_kinks(n, 1000 + static_cast<std::uint64_t>(n));
    const auto size = static_cast<std::size_t>(n);
    std::vector<float> out(size, 9.0f), in_place;
    add(a.data(), b.data(), out.data(), n);
    in_place = a;
    add(in_place.data(), b.data(), in_place.data(), n);
    for (std::size_t i = 0; i < size; ++i) {
      ASSERT_EQ(out[i], a[i] + b[i]);
      ASSERT_EQ(in_place[i], out[i]);
    }
    add_relu(a.data(), b.data(), out.data(), n);
    in_place = b;
    add_relu(a.data(), in_place.data(), in_place.data(), n);
    for (std::size_t i = 0; i < size; ++i) {
      const float sum = a[i] + b[i];
      ASSERT_EQ(out[i], sum > 0.0f ? sum : 0.0f);
      ASSERT_EQ(in_place[i], out[i]);
    }
    relu(a.data(), out.data(), n);
    in_place = a;
    relu(in_place.data(), in_place.data(), n);
    for (std::size_t i = 0; i < size; ++i) {
      ASSERT_EQ(out[i], a[i] > 0.0f ? a[i] : 0.0f);
      ASSERT_FALSE(std::signbit(out[i]));  // the kink gives +0, as nn::Activation's ReLU
      ASSERT_EQ(in_place[i], out[i]);
    }
    relu_backward(a.data(), b.data(), out.data(), n);
    in_place = b;
    relu_backward(a.data(), in_place.data(), in_place.data(), n);
    for (std::size_t i = 0; i < size; ++i) {
      ASSERT_EQ(out[i], a[i] > 0.0f ? b[i] : 0.0f);
      ASSERT_EQ(in_place[i], out[i]);
    }
  }
}

}  // namespace
}  // namespace dtrain::tensor
