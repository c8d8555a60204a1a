#include "dtrain/nn/max_pool2d.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

// Planes per thread below which a second thread costs more than it saves (a 28x28 plane is ~1 us).
constexpr std::int64_t kPlaneGrain = 16;

// Folds candidate v (at flat index at) into the running maximum: v replaces best when v > best, or
// when v is NaN and best is not (a NaN already taken stays). Selected with bit masks rather than
// branches: with random data a branch here mispredicts about half the time.
inline void fold(float v, std::int32_t at, float& best, std::int32_t& best_at) {
  const bool take = (v > best) | ((v != v) & (best == best));
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(take);
  best = std::bit_cast<float>((std::bit_cast<std::uint32_t>(v) & mask) |
                              (std::bit_cast<std::uint32_t>(best) & ~mask));
  best_at = static_cast<std::int32_t>((static_cast<std::uint32_t>(at) & mask) |
                                      (static_cast<std::uint32_t>(best_at) & ~mask));
}

// One (H, W) plane -> (OH, OW) maxima and their flat indices, any K and S; windows in row-major
// order, so the first maximum wins. Cost: OH*OW*K*K compares.
void pool_plane(const float* in, std::int64_t width, std::int64_t kernel, std::int64_t stride,
                std::int64_t oh_count, std::int64_t ow_count, float* out, std::int32_t* out_arg) {
  for (std::int64_t oh = 0; oh < oh_count; ++oh) {
    for (std::int64_t ow = 0; ow < ow_count; ++ow) {
      const std::int64_t corner = oh * stride * width + ow * stride;
      auto best = static_cast<std::int32_t>(corner);
      float best_value = in[corner];
      for (std::int64_t i = 0; i < kernel; ++i) {
        for (std::int64_t j = 0; j < kernel; ++j) {
          const std::int64_t at = corner + i * width + j;
          fold(in[at], static_cast<std::int32_t>(at), best_value, best);
        }
      }
      out[oh * ow_count + ow] = best_value;
      out_arg[oh * ow_count + ow] = best;
    }
  }
}

#if defined(__AVX512F__)

// The 2x2 stride-2 window of LeNet and most CNNs, 16 outputs per step with AVX-512: two 16-float
// loads of a row pair (masked at the row's end, so nothing past it is read) are split into their
// even and odd columns, giving the four candidates of 16 windows in row-major order (top-left,
// top-right, bottom-left, bottom-right); then three compare-and-blend steps, the same rule as
// fold() lane by lane. A 28-wide row is one step with 14 lanes live.
inline void fold16(__m512 v, __m512i at, __m512& best, __m512i& best_at) {
  const __mmask16 take =
      _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
      (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
  best = _mm512_mask_blend_ps(take, best, v);
  best_at = _mm512_mask_blend_epi32(take, best_at, at);
}

// Lane masks for n <= 16 outputs: the n outputs themselves and the 2n inputs in two halves.
struct Lanes {
  __mmask16 out, in_lo, in_hi;
};
inline Lanes lanes_for(std::int64_t n) {
  const auto bits = [](std::int64_t k) {
    return static_cast<__mmask16>(k >= 16 ? 0xFFFFu : (1u << static_cast<unsigned>(k)) - 1u);
  };
  return {bits(n), bits(2 * n), bits(std::max<std::int64_t>(2 * n - 16, 0))};
}

// Stores the lanes of m; a full mask takes a plain store (a masked store is slower on AMD Zen 4).
inline void store_lanes(float* at, __mmask16 m, __m512 v) {
  if (m == 0xFFFF) {
    _mm512_storeu_ps(at, v);
  } else {
    _mm512_mask_storeu_ps(at, m, v);
  }
}

void pool_plane_2x2(const float* in, std::int64_t width, std::int64_t oh_count,
                    std::int64_t ow_count, float* out, std::int32_t* out_arg) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i below = _mm512_set1_epi32(static_cast<std::int32_t>(width));
  for (std::int64_t oh = 0; oh < oh_count; ++oh) {
    const float* top = in + 2 * oh * width;
    const float* bottom = top + width;
    for (std::int64_t ow = 0; ow < ow_count; ow += 16) {
      const Lanes m = lanes_for(std::min<std::int64_t>(ow_count - ow, 16));
      const __m512 t0 = _mm512_maskz_loadu_ps(m.in_lo, top + 2 * ow);
      const __m512 t1 = _mm512_maskz_loadu_ps(m.in_hi, top + 2 * ow + 16);
      const __m512 b0 = _mm512_maskz_loadu_ps(m.in_lo, bottom + 2 * ow);
      const __m512 b1 = _mm512_maskz_loadu_ps(m.in_hi, bottom + 2 * ow + 16);
      const __m512i at_a = _mm512_add_epi32(
          _mm512_set1_epi32(static_cast<std::int32_t>(2 * oh * width + 2 * ow)), even);
      const __m512i at_c = _mm512_add_epi32(at_a, below);
      __m512 best = _mm512_permutex2var_ps(t0, even, t1);
      __m512i best_at = at_a;
      fold16(_mm512_permutex2var_ps(t0, odd, t1), _mm512_add_epi32(at_a, one), best, best_at);
      fold16(_mm512_permutex2var_ps(b0, even, b1), at_c, best, best_at);
      fold16(_mm512_permutex2var_ps(b0, odd, b1), _mm512_add_epi32(at_c, one), best, best_at);
      _mm512_mask_storeu_ps(out + oh * ow_count + ow, m.out, best);
      _mm512_mask_storeu_epi32(out_arg + oh * ow_count + ow, m.out, best_at);
    }
  }
}

// Backward of pool_plane_2x2 for one plane: windows do not overlap, so each input of a window gets
// dy where the argmax points and 0 elsewhere; the row pair is written whole (16 windows per step,
// the four masked gradients interleaved back into two 32-float rows) instead of zeroing the plane
// and scattering. Each gradient is formed as 0 + dy, exactly what the scatter computes (it turns a
// -0 into +0). A last row or column that no window covers (odd H or W) is zeroed.
void unpool_plane_2x2(const float* dy, const std::int32_t* arg, std::int64_t height,
                      std::int64_t width, std::int64_t oh_count, std::int64_t ow_count, float* dx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
  const __m512i right = _mm512_set1_epi32(1);
  const __m512i below = _mm512_set1_epi32(static_cast<std::int32_t>(width));
  const __m512 zero = _mm512_setzero_ps();
  for (std::int64_t oh = 0; oh < oh_count; ++oh) {
    float* top = dx + 2 * oh * width;
    float* bottom = top + width;
    for (std::int64_t ow = 0; ow < ow_count; ow += 16) {
      const Lanes m = lanes_for(std::min<std::int64_t>(ow_count - ow, 16));
      const __m512 g = _mm512_maskz_loadu_ps(m.out, dy + oh * ow_count + ow);
      const __m512i rel = _mm512_sub_epi32(
          _mm512_maskz_loadu_epi32(m.out, arg + oh * ow_count + ow),
          _mm512_add_epi32(_mm512_set1_epi32(static_cast<std::int32_t>(2 * oh * width + 2 * ow)),
                           even));
      const __m512 ga =
          _mm512_maskz_add_ps(_mm512_cmpeq_epi32_mask(rel, _mm512_setzero_si512()), zero, g);
      const __m512 gb = _mm512_maskz_add_ps(_mm512_cmpeq_epi32_mask(rel, right), zero, g);
      const __m512 gc = _mm512_maskz_add_ps(_mm512_cmpeq_epi32_mask(rel, below), zero, g);
      const __m512 gd = _mm512_maskz_add_ps(
          _mm512_cmpeq_epi32_mask(rel, _mm512_add_epi32(below, right)), zero, g);
      store_lanes(top + 2 * ow, m.in_lo, _mm512_permutex2var_ps(ga, low, gb));
      store_lanes(top + 2 * ow + 16, m.in_hi, _mm512_permutex2var_ps(ga, high, gb));
      store_lanes(bottom + 2 * ow, m.in_lo, _mm512_permutex2var_ps(gc, low, gd));
      store_lanes(bottom + 2 * ow + 16, m.in_hi, _mm512_permutex2var_ps(gc, high, gd));
    }
    if (width > 2 * ow_count) {
      top[width - 1] = 0.0f;
      bottom[width - 1] = 0.0f;
    }
  }
  if (height > 2 * oh_count) std::fill(dx + (height - 1) * width, dx + height * width, 0.0f);
}

#else

// The 2x2 stride-2 window of LeNet and most CNNs, unrolled: the four candidates in row-major order
// (top-left, top-right, bottom-left, bottom-right), three compare-and-blend steps per output.
void pool_plane_2x2(const float* in, std::int64_t width, std::int64_t oh_count,
                    std::int64_t ow_count, float* out, std::int32_t* out_arg) {
  const auto w = static_cast<std::int32_t>(width);
  for (std::int64_t oh = 0; oh < oh_count; ++oh) {
    const float* top = in + 2 * oh * width;
    const float* bottom = top + width;
    float* out_row = out + oh * ow_count;
    std::int32_t* arg_row = out_arg + oh * ow_count;
    const auto row_base = static_cast<std::int32_t>(2 * oh * width);
    for (std::int64_t ow = 0; ow < ow_count; ++ow) {
      const std::int32_t at_a = row_base + 2 * static_cast<std::int32_t>(ow);
      std::int32_t best = at_a;
      float best_value = top[2 * ow];
      fold(top[2 * ow + 1], at_a + 1, best_value, best);
      fold(bottom[2 * ow], at_a + w, best_value, best);
      fold(bottom[2 * ow + 1], at_a + w + 1, best_value, best);
      out_row[ow] = best_value;
      arg_row[ow] = best;
    }
  }
}

#endif

// Backward for one plane, any window: zero, then add each dy at its argmax (overlapping windows
// sum). Cost: H*W stores and OH*OW adds.
void unpool_plane(const float* dy, const std::int32_t* arg, std::int64_t plane_in,
                  std::int64_t plane_out, float* dx) {
  std::fill(dx, dx + plane_in, 0.0f);
  for (std::int64_t o = 0; o < plane_out; ++o) dx[arg[o]] += dy[o];
}

}  // namespace

MaxPool2d::MaxPool2d(std::string name, std::int64_t kernel, std::int64_t stride)
    : Layer(std::move(name)), kernel_(kernel), stride_(stride) {
  if (kernel_ <= 0 || stride_ <= 0) {
    throw ConfigError(
        fmt::format("layer {}: MaxPool2d needs kernel > 0 and stride > 0, got {} and {}",
                    this->name(), kernel_, stride_));
  }
}

std::string MaxPool2d::describe() const {
  return fmt::format("MaxPool2d({}x{}, stride {})", kernel_, kernel_, stride_);
}

tensor::Shape MaxPool2d::output_shape(const tensor::Shape& input) const {
  if (input.size() != 4) {
    throw ShapeError(fmt::format("layer {} ({}) expects input [B, C, H, W], got {}", name(),
                                 describe(), tensor::batch_shape_str(input)));
  }
  if (input[2] < kernel_ || input[3] < kernel_) {
    throw ShapeError(fmt::format(
        "layer {} ({}): window {}x{} is larger than the input {}x{} of input {}; use a larger "
        "input or fewer downsampling layers before it",
        name(), describe(), kernel_, kernel_, input[2], input[3], tensor::batch_shape_str(input)));
  }
  return {input[0], input[1], (input[2] - kernel_) / stride_ + 1,
          (input[3] - kernel_) / stride_ + 1};
}

const tensor::Tensor& MaxPool2d::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  DTRAIN_CHECK_LE(x.dim(2) * x.dim(3), std::int64_t{INT32_MAX});
  input_shape_ = x.shape();
  y_.ensure_shape(out_shape);
  const std::int64_t planes = out_shape[0] * out_shape[1];
  const std::int64_t height = x.dim(2), width = x.dim(3);
  const std::int64_t oh_count = out_shape[2], ow_count = out_shape[3];
  argmax_.resize(static_cast<std::size_t>(planes * oh_count * ow_count));
  const float* xd = x.data();
  float* yd = y_.data();
  std::int32_t* arg = argmax_.data();
  const std::int64_t kernel = kernel_, stride = stride_;
  compute_pool().parallel_for(planes, kPlaneGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const float* in = xd + plane * height * width;
      float* out = yd + plane * oh_count * ow_count;
      std::int32_t* out_arg = arg + plane * oh_count * ow_count;
      if (kernel == 2 && stride == 2) {
        pool_plane_2x2(in, width, oh_count, ow_count, out, out_arg);
      } else {
        pool_plane(in, width, kernel, stride, oh_count, ow_count, out, out_arg);
      }
    }
  });
  return y_;
}

const tensor::Tensor& MaxPool2d::backward(const tensor::Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return none_;
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  dx_.ensure_shape(input_shape_);
  const std::int64_t planes = input_shape_[0] * input_shape_[1];
  const std::int64_t height = input_shape_[2], width = input_shape_[3];
  const std::int64_t oh_count = dy.dim(2), ow_count = dy.dim(3);
  const std::int64_t plane_in = height * width;
  const std::int64_t plane_out = oh_count * ow_count;
  [[maybe_unused]] const bool two_by_two = kernel_ == 2 && stride_ == 2;
  const float* g = dy.data();
  float* dx = dx_.data();
  const std::int32_t* arg = argmax_.data();
  compute_pool().parallel_for(planes, kPlaneGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
#if defined(__AVX512F__)
      if (two_by_two) {
        unpool_plane_2x2(g + plane * plane_out, arg + plane * plane_out, height, width, oh_count,
                         ow_count, dx + plane * plane_in);
        continue;
      }
#endif
      unpool_plane(g + plane * plane_out, arg + plane * plane_out, plane_in, plane_out,
                   dx + plane * plane_in);
    }
  });
  return dx_;
}

std::unique_ptr<Layer> MaxPool2d::clone() const {
  return std::make_unique<MaxPool2d>(name(), kernel_, stride_);
}

}  // namespace dtrain::nn
