// Element-wise passes over float ranges for the residual blocks and activations: the sum of two
// branches, ReLU, and ReLU's backward mask, each as one loop over raw pointers that GCC turns into
// AVX-512 (or AVX2) code. The loops run on the calling thread; callers split ranges over the
// compute pool themselves.
//
// Why a file of its own: written as a lambda over an index inside a parallel_for, the same passes
// compiled to scalar, branchy code that re-read the captured pointers on every element (GCC could
// not prove the stores did not alias them, and `y > 0 ? dy : 0` loaded dy only on one side of the
// branch). ResNet's backward spent 13% of its time in two such masks. Here every input is loaded
// unconditionally and selected with a compare, so each pass runs at memory speed.
// Every result is exact (a sum of two floats, a max with 0, a select): the bits do not depend on
// how a range is cut.
#pragma once

#include <cstdint>

namespace dtrain::tensor {

// out[i] = a[i] + b[i]. out may be a or b.
void add(const float* a, const float* b, float* out, std::int64_t n);

// out[i] = max(a[i] + b[i], 0) (a ReLU after a residual sum). out may be a or b.
void add_relu(const float* a, const float* b, float* out, std::int64_t n);

// out[i] = max(x[i], 0). out may be x.
void relu(const float* x, float* out, std::int64_t n);

// out[i] = y[i] > 0 ? dy[i] : 0: ReLU's backward from its output y (or its input: same sign), the
// left derivative at 0 as nn::Activation takes it. out may be dy.
void relu_backward(const float* y, const float* dy, float* out, std::int64_t n);

}  // namespace dtrain::tensor
