// CausalSelfAttention: multi-head self-attention with a causal mask, as in GPT-2 and the reference
// model (../shared/peers/scripts/train_charlm.py, Block.forward).
//
//   qkv = x Wqkv^T + bqkv            x (B, T, d) -> (B, T, 3d)   one fused Linear "<name>.qkv"
//   per batch b and head h (dh = d / H; q, k, v are columns [h dh, (h+1) dh) of qkv's thirds):
//     S = Q K^T / sqrt(dh)                                (T, dh) x (dh, T) -> (T, T)
//     P = softmax over each row i of S[i, 0..i]          (keys after the query are masked: P = 0)
//     Y = P V                                             (T, T) x (T, dh) -> (T, dh)
//   the heads' Y side by side                             -> (B, T, d)
//   y = Y Wproj^T + bproj                                 (B, T, d)   Linear "<name>.proj"
// Backward of the core, per (b, h), with the scale folded into dS:
//   dP = dY V^T,  dV = P^T dY,  dS = P (dP - rowsum(dP P)) / sqrt(dh),  dQ = dS K,  dK = dS^T Q
//
// Fast path: the products read Q, K, V in place in qkv (row stride 3d) and write Y in place in
// (B, T, d) (row stride d). S = Q K^T and dP = dY V^T take K or V transposed into a per-thread
// (dh, T) buffer, so that they, Y = P V and dQ = dS K are untransposed single-threaded GEMMs
// (tensor::gemm_serial: OpenBLAS's small-matrix kernel); dV = P^T dY and dK = dS^T Q run in an
// AVX-512 kernel (outer_product_sum, .cc) for dh in {16, 32, 48, 64}, gemm_serial otherwise. The
// softmax and dS rows are AVX-512 passes with masked tails where available. The (b, h) pairs are
// split over the compute pool, one contiguous range per thread, each thread with its own (T, T)
// scratch for dP/dS. Only P is kept for backward, B H T^2 floats (8 MB per layer for the
// reference model).
// The masked upper triangle is skipped in row tiles of `tile` queries: queries [r, r + tile) see
// keys [0, r + tile), so each product covers (nb + 1) / (2 nb) of the full square, nb = T / tile
// (62.5% at T = 128, tile 32); the entries above the diagonal inside a tile are computed and then
// set to 0 in P and dS.
// FLOPs for the core: 12 T^2 dh per (b, h) for forward and backward over the full square, so
// 12 T d per token and layer (197 kFLOP at T = d = 128), about 0.6 of that with tiles of 32.
// causal_attention_naive and causal_attention_naive_backward are the definition in plain loops
// (double accumulation, the full square, explicit mask), which the fast path is tested against.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/init.h"
#include "dtrain/nn/layer.h"
#include "dtrain/nn/linear.h"

namespace dtrain::nn {

// The sizes of one attention core call: batch B, sequence length T, heads H, width d (H divides d).
struct AttentionDims {
  std::int64_t batch = 0;
  std::int64_t length = 0;
  std::int64_t heads = 0;
  std::int64_t dim = 0;
  std::int64_t head_dim() const { return dim / heads; }
};

// Fast core forward: qkv (B, T, 3d) -> y (B, T, d); probs (B, H, T, T) receives P (row i holds
// P[i, 0..i] and zeros up to the end of its tile; later columns are not written).
void causal_attention_forward(const AttentionDims& dims, std::int64_t tile, const float* qkv,
                              float* probs, float* y);
// Fast core backward: dy (B, T, d) -> dqkv (B, T, 3d) (overwritten), from forward's qkv and probs.
// scratch: resized to (tasks, T, T), kept by the caller across steps.
void causal_attention_backward(const AttentionDims& dims, std::int64_t tile, const float* qkv,
                               const float* probs, const float* dy, tensor::Tensor& scratch,
                               float* dqkv);

// The naive twins: the same mathematics in plain loops over the full (T, T) square.
void causal_attention_naive(const AttentionDims& dims, const float* qkv, float* y);
void causal_attention_naive_backward(const AttentionDims& dims, const float* qkv, const float* dy,
                                     float* dqkv);

class CausalSelfAttention : public Layer {
 public:
  // Query tile of the causal skip (see above); 32 measured best at T = 128 (docs/TRANSFORMER.md).
  static constexpr std::int64_t kDefaultTile = 32;

  // Linear weights start as N(0, sigma^2), biases at 0 (GPT-2's and the reference's init).
  CausalSelfAttention(std::string name, std::int64_t dim, std::int64_t heads, std::int64_t block,
                      float sigma = 0.02f);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, T, d) with 1 <= T <= block -> (B, T, d).
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  // qkv, then proj.
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  // residual + forward(x), the sum folded into proj's product (Linear::forward_onto).
  const tensor::Tensor& forward_onto(const tensor::Tensor& x, const tensor::Tensor& residual,
                                     const ForwardContext& ctx);
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  // qkv, proj.
  std::vector<Layer*> sublayers() override;
  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }
  std::int64_t heads() const { return heads_; }
  // For benchmarks and tests: the query tile (>= 1; >= T turns the causal skip off).
  void set_tile(std::int64_t tile);
  std::int64_t tile() const { return tile_; }

 private:
  std::int64_t dim_;
  std::int64_t heads_;
  std::int64_t block_;
  std::int64_t tile_ = kDefaultTile;
  std::unique_ptr<Linear> qkv_, proj_;
  AttentionDims dims_;
  tensor::Tensor qkv_out_;    // view of qkv_'s output (B, T, 3d), kept for backward
  tensor::Tensor probs_;      // P, (B, H, T, T)
  tensor::Tensor heads_out_;  // Y of every head, (B, T, d): proj's input
  tensor::Tensor dqkv_;       // (B, T, 3d)
  tensor::Tensor scratch_;    // (tasks, T, T): dP, then dS

  // Everything up to proj: qkv, the core; returns the heads' Y, (B, T, d).
  const tensor::Tensor& core_forward(const tensor::Tensor& x, const ForwardContext& ctx);
};

}  // namespace dtrain::nn
