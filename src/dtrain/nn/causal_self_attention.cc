#include "dtrain/nn/causal_self_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/nn/fast_math.h"
#include "dtrain/tensor/gemm_serial.h"
#include "dtrain/tensor/transpose.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace dtrain::nn {
namespace {

using tensor::gemm_serial;
using tensor::Trans;

// Where head h of batch b lies: Q, K, V inside qkv (row stride 3d), Y inside (B, T, d) (row
// stride d), P inside (B, H, T, T).
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  std::int64_t qkv_offset;  // of q's first element in qkv (k: + d, v: + 2d)
  std::int64_t y_offset;
  std::int64_t p_offset;
};

HeadView head_view(const AttentionDims& dims, const float* qkv, std::int64_t pair) {
  const std::int64_t b = pair / dims.heads;
  const std::int64_t h = pair % dims.heads;
  const std::int64_t t = dims.length;
  const std::int64_t d = dims.dim;
  const std::int64_t qkv_offset = b * t * 3 * d + h * dims.head_dim();
  return HeadView{qkv + qkv_offset,
                  qkv + qkv_offset + d,
                  qkv + qkv_offset + 2 * d,
                  qkv_offset,
                  b * t * d + h * dims.head_dim(),
                  pair * t * t};
}

#if defined(__AVX512F__)
// The lanes of a 16-float chunk that lie below `remaining`: all 16 when remaining >= 16, none when
// remaining <= 0.
inline __mmask16 lanes_below(std::int64_t remaining) {
  if (remaining >= 16) return static_cast<__mmask16>(0xFFFF);
  if (remaining <= 0) return 0;
  return static_cast<__mmask16>((1u << remaining) - 1u);
}
#endif

// One row of a tile in place: S[0, keys) in; P out, softmax over [0, n) and zeros over [n, keys).
// AVX-512: three passes over the row in L1 (max; exp, sum and the zeros; scale), masked tails, so
// a row of any length costs ceil(keys / 16) chunks per pass and no scalar exp.
inline void causal_softmax_row(float* row, std::int64_t n, std::int64_t keys) {
#if defined(__AVX512F__)
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 vmax = neg_inf;
  for (std::int64_t j = 0; j < n; j += 16) {
    vmax = _mm512_maskz_max_ps(kAllLanes16, vmax,
                               _mm512_mask_loadu_ps(neg_inf, lanes_below(n - j), row + j));
  }
  const __m512 max = _mm512_set1_ps(reduce_max16(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (std::int64_t j = 0; j < keys; j += 16) {
    const __mmask16 live = lanes_below(n - j);  // 0 once j >= n
    const __m512 e = _mm512_maskz_mov_ps(
        live, fast_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, row + j), max)));
    vsum = _mm512_add_ps(vsum, e);
    _mm512_mask_storeu_ps(row + j, lanes_below(keys - j), e);
  }
  const __m512 inv_sum = _mm512_set1_ps(1.0f / reduce_add16(vsum));
  for (std::int64_t j = 0; j < n; j += 16) {
    const __mmask16 live = lanes_below(n - j);
    _mm512_mask_storeu_ps(row + j, live,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(live, row + j), inv_sum));
  }
#else
  const float max = lane_max(row, n);
  for (std::int64_t j = 0; j < n; ++j) row[j] = fast_exp(row[j] - max);
  const float inv_sum = 1.0f / lane_sum(n, [&](std::int64_t j) { return row[j]; });
  for (std::int64_t j = 0; j < n; ++j) row[j] *= inv_sum;
  std::fill(row + n, row + keys, 0.0f);
#endif
}

// One row of dS in place: dP[0, keys) in, dS = scale P (dP - sum_j dP P) out, from forward's P
// row (zero over [n, keys), so those columns come out 0 without a separate fill: one pass for the
// sum, one for dS, over all `keys` columns).
inline void softmax_backward_row(const float* p_row, float* row, std::int64_t n, std::int64_t keys,
                                 float scale) {
#if defined(__AVX512F__)
  static_cast<void>(n);
  __m512 vdot = _mm512_setzero_ps();
  for (std::int64_t j = 0; j < keys; j += 16) {
    const __mmask16 live = lanes_below(keys - j);
    vdot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, row + j),
                           _mm512_maskz_loadu_ps(live, p_row + j), vdot);
  }
  const __m512 dot = _mm512_set1_ps(reduce_add16(vdot));
  const __m512 vscale = _mm512_set1_ps(scale);
  for (std::int64_t j = 0; j < keys; j += 16) {
    const __mmask16 live = lanes_below(keys - j);
    const __m512 sp = _mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(live, p_row + j));
    _mm512_mask_storeu_ps(
        row + j, live, _mm512_mul_ps(sp, _mm512_sub_ps(_mm512_maskz_loadu_ps(live, row + j), dot)));
  }
#else
  const float dot = lane_sum(n, [&](std::int64_t j) { return row[j] * p_row[j]; });
  for (std::int64_t j = 0; j < n; ++j) row[j] = scale * p_row[j] * (row[j] - dot);
  std::fill(row + n, row + keys, 0.0f);
#endif
}

// C (m, n) = A^T B for the key tiles' gradients, dV = P^T dY and dK = dS^T Q: A is (k, m) with
// row stride lda, B (k, n) with row stride ldb, C (m, n) overwritten (row stride ldc). Both
// operands have the summed index as their row, so C is a sum of k outer products of rows:
// C[r, :] += A[i, r] B[i, :]. With n = 16 kVecs, 8 rows of C live in 8 kVecs registers, each
// step i loads B's row once and broadcasts 8 values of A's row: 2 m n k FLOPs, 8 kVecs FMAs per
// (i, 8 rows), A and B read from L1/L2, C written once. At the reference shapes (m = 32, n = 32,
// k <= 128) it took about 0.4 ms less per layer than OpenBLAS's small-matrix kernel (of ~10 ms
// for the attention core). Each C[r, j] sums over i in order, so the result depends only on the
// arguments.
#if defined(__AVX512F__)
template <int kVecs>
void outer_product_sum(std::int64_t m, std::int64_t k, const float* a, std::int64_t lda,
                       const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  constexpr std::int64_t kRows = 8;
  std::int64_t r0 = 0;
  for (; r0 + kRows <= m; r0 += kRows) {
    __m512 acc[kRows][kVecs];
    for (auto& row : acc) {
      for (auto& v : row) v = _mm512_setzero_ps();
    }
    for (std::int64_t i = 0; i < k; ++i) {
      const float* a_row = a + i * lda + r0;
      const float* b_row = b + i * ldb;
      __m512 bv[kVecs];
      for (int v = 0; v < kVecs; ++v) bv[v] = _mm512_loadu_ps(b_row + 16 * v);
      for (std::int64_t r = 0; r < kRows; ++r) {
        const __m512 av = _mm512_set1_ps(a_row[r]);
        for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
    for (std::int64_t r = 0; r < kRows; ++r) {
      for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(c + (r0 + r) * ldc + 16 * v, acc[r][v]);
    }
  }
  // The last m % 8 rows, one at a time (tiles that are not a multiple of 8).
  for (; r0 < m; ++r0) {
    __m512 acc[kVecs];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (std::int64_t i = 0; i < k; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * lda + r0]);
      for (int v = 0; v < kVecs; ++v) {
        acc[v] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + i * ldb + 16 * v), acc[v]);
      }
    }
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(c + r0 * ldc + 16 * v, acc[v]);
  }
}
#endif

// C = A^T B as above: outer_product_sum where n is 16, 32, 48 or 64, else gemm_serial.
void gemm_tn_rows(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                  const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
#if defined(__AVX512F__)
  switch (n) {
    case 16: return outer_product_sum<1>(m, k, a, lda, b, ldb, c, ldc);
    case 32: return outer_product_sum<2>(m, k, a, lda, b, ldb, c, ldc);
    case 48: return outer_product_sum<3>(m, k, a, lda, b, ldb, c, ldc);
    case 64: return outer_product_sum<4>(m, k, a, lda, b, ldb, c, ldc);
    default: break;
  }
#endif
  gemm_serial(Trans::kYes, Trans::kNo, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

// K or V of one head transposed, (dh, T), in a buffer of the calling thread (pool threads live as
// long as the pool, so it is allocated once). The products S = Q K^T and dP = dY V^T then run as
// (rows, dh) x (dh, keys) without a transposed operand: OpenBLAS takes its small-matrix kernel
// for those (near its peak), where the transposed form went through its packing path at about
// half of it for keys >= 64. Cost: T dh copies per head, against 2 T^2 dh (5/8 of it with tiles
// of 32) FLOPs per product; the copy's time is mostly the head's first reads from memory (an
// AVX-512 16 x 16 transpose in registers was no faster, gathers 2.5x slower).
float* transposed_head(const float* m, std::int64_t t, std::int64_t dh, std::int64_t ld) {
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<std::size_t>(t * dh));
  tensor::transpose(t, dh, m, ld, buffer.data(), t);
  return buffer.data();
}

// Runs fn(first_pair, end_pair, task) over the B*H pairs, one contiguous range per pool thread.
template <typename Fn>
void for_each_pair_range(std::int64_t pairs, const Fn& fn) {
  const int tasks = static_cast<int>(std::min<std::int64_t>(compute_pool().threads(), pairs));
  compute_pool().run(tasks,
                     [&](int task) { fn(pairs * task / tasks, pairs * (task + 1) / tasks, task); });
}

}  // namespace

void causal_attention_forward(const AttentionDims& dims, std::int64_t tile, const float* qkv,
                              float* probs, float* y) {
  const std::int64_t t = dims.length;
  const std::int64_t d = dims.dim;
  const std::int64_t dh = dims.head_dim();
  const std::int64_t ld_qkv = 3 * d;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  for_each_pair_range(dims.batch * dims.heads, [&](std::int64_t first, std::int64_t end, int) {
    for (std::int64_t pair = first; pair < end; ++pair) {
      const HeadView hv = head_view(dims, qkv, pair);
      float* p = probs + hv.p_offset;
      float* yh = y + hv.y_offset;
      float* kt = transposed_head(hv.k, t, dh, ld_qkv);
      for (std::int64_t r0 = 0; r0 < t; r0 += tile) {
        const std::int64_t rows = std::min(tile, t - r0);
        const std::int64_t keys = r0 + rows;  // queries [r0, r0 + rows) see keys [0, keys)
        // S = Q K^T / sqrt(dh), the tile's rows and the keys they see.
        gemm_serial(Trans::kNo, Trans::kNo, rows, keys, dh, scale, hv.q + r0 * ld_qkv, ld_qkv, kt,
                    t, 0.0f, p + r0 * t, t);
        // Causal softmax of each row i over keys 0..i; zeros up to the tile's end.
        for (std::int64_t i = r0; i < keys; ++i) causal_softmax_row(p + i * t, i + 1, keys);
        // Y = P V for the tile's rows.
        gemm_serial(Trans::kNo, Trans::kNo, rows, dh, keys, 1.0f, p + r0 * t, t, hv.v, ld_qkv, 0.0f,
                    yh + r0 * d, d);
      }
    }
  });
}

void causal_attention_backward(const AttentionDims& dims, std::int64_t tile, const float* qkv,
                               const float* probs, const float* dy, tensor::Tensor& scratch,
                               float* dqkv) {
  const std::int64_t t = dims.length;
  const std::int64_t d = dims.dim;
  const std::int64_t dh = dims.head_dim();
  const std::int64_t ld_qkv = 3 * d;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  const std::int64_t pairs = dims.batch * dims.heads;
  scratch.ensure_shape({std::min<std::int64_t>(compute_pool().threads(), pairs), t, t});
  float* scratch_base = scratch.data();
  for_each_pair_range(pairs, [&](std::int64_t first, std::int64_t end, int task) {
    float* ds = scratch_base + static_cast<std::int64_t>(task) * t * t;
    for (std::int64_t pair = first; pair < end; ++pair) {
      const HeadView hv = head_view(dims, qkv, pair);
      const float* p = probs + hv.p_offset;
      const float* dyh = dy + hv.y_offset;
      float* dq = dqkv + hv.qkv_offset;
      float* dk = dq + d;
      float* dv = dq + 2 * d;
      const float* vt = transposed_head(hv.v, t, dh, ld_qkv);
      for (std::int64_t r0 = 0; r0 < t; r0 += tile) {
        const std::int64_t rows = std::min(tile, t - r0);
        const std::int64_t keys = r0 + rows;
        // dP = dY V^T for the tile's rows.
        gemm_serial(Trans::kNo, Trans::kNo, rows, keys, dh, 1.0f, dyh + r0 * d, d, vt, t, 0.0f,
                    ds + r0 * t, t);
        // dS = P (dP - rowsum(dP P)) / sqrt(dh), in place; 0 above the diagonal.
        for (std::int64_t i = r0; i < keys; ++i) {
          softmax_backward_row(p + i * t, ds + i * t, i + 1, keys, scale);
        }
        // dQ = dS K for the tile's rows.
        gemm_serial(Trans::kNo, Trans::kNo, rows, dh, keys, 1.0f, ds + r0 * t, t, hv.k, ld_qkv,
                    0.0f, dq + r0 * ld_qkv, ld_qkv);
      }
      // Keys [c0, c0 + cols) are seen by queries [c0, T): dV = P^T dY and dK = dS^T Q over those.
      for (std::int64_t c0 = 0; c0 < t; c0 += tile) {
        const std::int64_t cols = std::min(tile, t - c0);
        const std::int64_t queries = t - c0;
        gemm_tn_rows(cols, dh, queries, p + c0 * t + c0, t, dyh + c0 * d, d, dv + c0 * ld_qkv,
                     ld_qkv);
        gemm_tn_rows(cols, dh, queries, ds + c0 * t + c0, t, hv.q + c0 * ld_qkv, ld_qkv,
                     dk + c0 * ld_qkv, ld_qkv);
      }
    }
  });
}

void causal_attention_naive(const AttentionDims& dims, const float* qkv, float* y) {
  const std::int64_t t = dims.length;
  const std::int64_t d = dims.dim;
  const std::int64_t dh = dims.head_dim();
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  std::vector<double> s(static_cast<std::size_t>(t));
  for (std::int64_t b = 0; b < dims.batch; ++b) {
    for (std::int64_t h = 0; h < dims.heads; ++h) {
      auto q = [&](std::int64_t i, std::int64_t c) {
        return qkv[(b * t + i) * 3 * d + h * dh + c];
      };
      auto k = [&](std::int64_t i, std::int64_t c) { return q(i, d + c); };
      auto v = [&](std::int64_t i, std::int64_t c) { return q(i, 2 * d + c); };
      for (std::int64_t i = 0; i < t; ++i) {
        double max = -INFINITY;
        for (std::int64_t j = 0; j < t; ++j) {
          double dot = 0.0;
          for (std::int64_t c = 0; c < dh; ++c) dot += static_cast<double>(q(i, c)) * k(j, c);
          s[static_cast<std::size_t>(j)] = j <= i ? dot * scale : -INFINITY;  // the causal mask
          max = std::max(max, s[static_cast<std::size_t>(j)]);
        }
        double sum = 0.0;
        for (std::int64_t j = 0; j < t; ++j) sum += std::exp(s[static_cast<std::size_t>(j)] - max);
        for (std::int64_t c = 0; c < dh; ++c) {
          double out = 0.0;
          for (std::int64_t j = 0; j < t; ++j) {
            out += std::exp(s[static_cast<std::size_t>(j)] - max) / sum * v(j, c);
          }
          y[(b * t + i) * d + h * dh + c] = static_cast<float>(out);
        }
      }
    }
  }
}

void causal_attention_naive_backward(const AttentionDims& dims, const float* qkv, const float* dy,
                                     float* dqkv) {
  const std::int64_t t = dims.length;
  const std::int64_t d = dims.dim;
  const std::int64_t dh = dims.head_dim();
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  const auto tt = static_cast<std::size_t>(t * t);
  std::vector<double> p(tt), dp(tt), ds(tt);
  std::fill(dqkv, dqkv + dims.batch * t * 3 * d, 0.0f);
  for (std::int64_t b = 0; b < dims.batch; ++b) {
    for (std::int64_t h = 0; h < dims.heads; ++h) {
      const std::int64_t base = b * t * 3 * d + h * dh;
      auto at = [&](std::int64_t i, std::int64_t part, std::int64_t c) {
        return base + i * 3 * d + part * d + c;
      };
      auto dy_at = [&](std::int64_t i, std::int64_t c) {
        return static_cast<double>(dy[(b * t + i) * d + h * dh + c]);
      };
      auto ij = [&](std::int64_t i, std::int64_t j) { return static_cast<std::size_t>(i * t + j); };
      // P, recomputed from the definition.
      for (std::int64_t i = 0; i < t; ++i) {
        double max = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (std::int64_t c = 0; c < dh; ++c) {
            dot += static_cast<double>(qkv[at(i, 0, c)]) * qkv[at(j, 1, c)];
          }
          p[ij(i, j)] = dot * scale;
          max = std::max(max, p[ij(i, j)]);
        }
        double sum = 0.0;
        for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(p[ij(i, j)] - max);
        for (std::int64_t j = 0; j < t; ++j) {
          p[ij(i, j)] = j <= i ? std::exp(p[ij(i, j)] - max) / sum : 0.0;
        }
      }
      // dP = dY V^T, dS = P (dP - sum_j dP P) scale.
      for (std::int64_t i = 0; i < t; ++i) {
        double dot = 0.0;
        for (std::int64_t j = 0; j < t; ++j) {
          double g = 0.0;
          for (std::int64_t c = 0; c < dh; ++c) g += dy_at(i, c) * qkv[at(j, 2, c)];
          dp[ij(i, j)] = g;
          dot += g * p[ij(i, j)];
        }
        for (std::int64_t j = 0; j < t; ++j) {
          ds[ij(i, j)] = p[ij(i, j)] * (dp[ij(i, j)] - dot) * scale;
        }
      }
      // dQ = dS K, dK = dS^T Q, dV = P^T dY.
      for (std::int64_t i = 0; i < t; ++i) {
        for (std::int64_t c = 0; c < dh; ++c) {
          double gq = 0.0, gk = 0.0, gv = 0.0;
          for (std::int64_t j = 0; j < t; ++j) {
            gq += ds[ij(i, j)] * qkv[at(j, 1, c)];
            gk += ds[ij(j, i)] * qkv[at(j, 0, c)];
            gv += p[ij(j, i)] * dy_at(j, c);
          }
          dqkv[at(i, 0, c)] = static_cast<float>(gq);
          dqkv[at(i, 1, c)] = static_cast<float>(gk);
          dqkv[at(i, 2, c)] = static_cast<float>(gv);
        }
      }
    }
  }
}

CausalSelfAttention::CausalSelfAttention(std::string name, std::int64_t dim, std::int64_t heads,
                                         std::int64_t block, float sigma)
    : Layer(std::move(name)), dim_(dim), heads_(heads), block_(block) {
  if (dim_ <= 0 || heads_ <= 0 || block_ <= 0 || dim_ % heads_ != 0) {
    throw ConfigError(fmt::format(
        "layer {}: attention needs a width divisible by the head count and a positive block, got "
        "width {}, {} heads, block {}",
        this->name(), dim_, heads_, block_));
  }
  qkv_ = std::make_unique<Linear>(this->name() + ".qkv", dim_, 3 * dim_, InitKind::kNormal, sigma);
  proj_ = std::make_unique<Linear>(this->name() + ".proj", dim_, dim_, InitKind::kNormal, sigma);
}

std::string CausalSelfAttention::describe() const {
  return fmt::format("CausalSelfAttention({}, {} heads, block {})", dim_, heads_, block_);
}

tensor::Shape CausalSelfAttention::output_shape(const tensor::Shape& input) const {
  if (input.size() != 3 || input[1] < 1 || input[1] > block_ || input[2] != dim_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, T, {}] with 1 <= T <= {}, got {}; check the previous "
        "layer's output",
        name(), describe(), dim_, block_, tensor::batch_shape_str(input)));
  }
  return input;
}

void CausalSelfAttention::declare(ParamStore& store) {
  qkv_->declare(store);
  proj_->declare(store);
}

void CausalSelfAttention::bind(ParamStore& store) {
  qkv_->bind(store);
  proj_->bind(store);
}

void CausalSelfAttention::init(Rng& rng) {
  qkv_->init(rng);
  proj_->init(rng);
}

void CausalSelfAttention::set_tile(std::int64_t tile) {
  if (tile < 1) throw ConfigError(fmt::format("layer {}: tile must be >= 1, got {}", name(), tile));
  tile_ = tile;
}

const tensor::Tensor& CausalSelfAttention::core_forward(const tensor::Tensor& x,
                                                        const ForwardContext& ctx) {
  output_shape(x.shape());
  dims_ = AttentionDims{x.dim(0), x.dim(1), heads_, dim_};
  qkv_out_ = qkv_->forward(x, ctx);
  probs_.ensure_shape({dims_.batch, heads_, dims_.length, dims_.length});
  heads_out_.ensure_shape(x.shape());
  causal_attention_forward(dims_, tile_, qkv_out_.data(), probs_.data(), heads_out_.data());
  return heads_out_;
}

const tensor::Tensor& CausalSelfAttention::forward(const tensor::Tensor& x,
                                                   const ForwardContext& ctx) {
  return proj_->forward(core_forward(x, ctx), ctx);
}

const tensor::Tensor& CausalSelfAttention::forward_onto(const tensor::Tensor& x,
                                                        const tensor::Tensor& residual,
                                                        const ForwardContext& ctx) {
  return proj_->forward_onto(core_forward(x, ctx), residual, ctx);
}

const tensor::Tensor& CausalSelfAttention::backward(const tensor::Tensor& dy,
                                                    bool need_input_grad) {
  const tensor::Tensor& dheads = proj_->backward(dy, /*need_input_grad=*/true);
  dqkv_.ensure_shape(qkv_out_.shape());
  causal_attention_backward(dims_, tile_, qkv_out_.data(), probs_.data(), dheads.data(), scratch_,
                            dqkv_.data());
  return qkv_->backward(dqkv_, need_input_grad);
}

std::vector<Layer*> CausalSelfAttention::sublayers() { return {qkv_.get(), proj_.get()}; }

std::unique_ptr<Layer> CausalSelfAttention::clone() const {
  auto copy = std::make_unique<CausalSelfAttention>(name(), dim_, heads_, block_);
  copy->tile_ = tile_;
  return copy;
}

}  // namespace dtrain::nn
