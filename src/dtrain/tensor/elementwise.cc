#include "dtrain/tensor/elementwise.h"

namespace dtrain::tensor {

// The pointers may alias (out == a is allowed), so no __restrict: each element is read before it
// is written, and GCC versions the loops on overlap at run time.

void add(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_relu(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float sum = a[i] + b[i];
    out[i] = sum > 0.0f ? sum : 0.0f;
  }
}

void relu(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    out[i] = v > 0.0f ? v : 0.0f;
  }
}

void relu_backward(const float* y, const float* dy, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = dy[i];
    out[i] = y[i] > 0.0f ? g : 0.0f;
  }
}

}  // namespace dtrain::tensor
