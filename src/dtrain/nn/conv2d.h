// Conv2d: 2-D convolution (cross-correlation, as in PyTorch) over a batch of images, by im2col
// and one GEMM per image.
//
// x (B, C, H, W) -> y (B, F, OH, OW), OH = (H + 2P - K) / S + 1 (likewise OW), square kernel K,
// stride S, zero padding P. Weight (F, C, K, K) as in torch.nn.Conv2d, bias (F) optional.
// Per image b, with Q = OH*OW and R = C*K*K:
//   forward   cols_b (R, Q) = im2col(x[b])
//             y[b]   (F, Q) = bias + W (F, R) x cols_b                        2*F*R*Q FLOPs
//   backward  dW    (F, R) += dy[b] (F, Q) x cols_b^T                         2*F*R*Q FLOPs
//             db    (F)    += row sums of dy[b]
//             dcols (R, Q)  = W^T x dy[b], then dx[b] = col2im(dcols)          2*F*R*Q FLOPs
// y[b] and dy[b] are already (F, Q) matrices, so no reordering is needed.
// Where the time goes (LeNet, batch 128, measured with bench/conv2d_bench.cc): a 6 x 25 x 784
// GEMM runs at ~100 GFLOP/s when its operands are in cache, so im2col and col2im cost more than
// the products. So the batch is walked in chunks of G images whose cols fill about kChunkFloats
// (256 KB, inside L2): the chunk's im2col (and col2im) are split over the compute pool, then its G
// GEMMs run on the calling thread (tensor::gemm slices a product over the pool itself once it is
// large enough, as in a ResNet's 3x3 layers). One GEMM over the whole batch was tried and was
// slower: its cols is 10 MB at batch 128 and must be reordered in and out. cols is recomputed in
// backward rather than kept. G depends only on the shapes, and im2col/col2im are exact, so the
// thread count changes results only as much as it changes tensor::gemm's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "dtrain/nn/init.h"
#include "dtrain/nn/layer.h"
#include "dtrain/tensor/im2col.h"

namespace dtrain::nn {

class Conv2d : public Layer {
 public:
  // sigma is used only by InitKind::kNormal; fan_in = C*K*K, fan_out = F*K*K.
  Conv2d(std::string name, std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         std::int64_t stride = 1, std::int64_t padding = 0, bool bias = true,
         InitKind init = InitKind::kHe, float sigma = 0.01f);

  std::string describe() const override;
  // (B, C, H, W) -> (B, F, OH, OW); a wrong rank, a channel mismatch or a kernel larger than the
  // padded input is a ShapeError naming the layer and both shapes.
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  std::int64_t in_channels() const { return in_channels_; }
  std::int64_t out_channels() const { return out_channels_; }
  std::int64_t kernel() const { return kernel_; }
  std::int64_t stride() const { return stride_; }
  std::int64_t padding() const { return padding_; }
  bool has_bias() const { return has_bias_; }
  // Views into the store, valid after bind(): (F, C, K, K) and (F) (empty without bias).
  const tensor::Tensor& weight() const { return weight_; }
  const tensor::Tensor& bias() const { return bias_; }

 private:
  // Images per chunk: about kChunkFloats of cols (see the header comment).
  std::int64_t chunk_images(std::int64_t batch) const;
  // Runs fn(b) for b in [begin, end), split into contiguous ranges over the compute pool; inline
  // when the pass moves fewer than kParallelGrain floats (floats_per_image each).
  void for_each_image(std::int64_t begin, std::int64_t end, std::int64_t floats_per_image,
                      const std::function<void(std::int64_t b)>& fn);

  std::int64_t in_channels_;
  std::int64_t out_channels_;
  std::int64_t kernel_;
  std::int64_t stride_;
  std::int64_t padding_;
  bool has_bias_;
  InitKind init_kind_;
  float sigma_;
  int weight_index_ = -1;
  int bias_index_ = -1;
  tensor::Tensor weight_, bias_, weight_grad_, bias_grad_;  // views into the ParamStore
  tensor::ConvGeometry geometry_;                           // of the last forward's input
  tensor::Shape input_shape_;                               // (B, C, H, W) of the last forward
  tensor::Tensor x_;      // view of the last input (B, C, H, W), to recompute cols in backward
  tensor::Tensor cols_;   // (G, R, Q): one chunk's images
  tensor::Tensor dcols_;  // (G, R, Q)
  tensor::Tensor y_;      // (B, F, OH, OW)
  tensor::Tensor dx_;     // (B, C, H, W)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
