// Conv2d: 2-D convolution (cross-correlation, as in PyTorch) over a batch of images, by im2col
// and one GEMM per image, or by the direct kernels of tensor/conv_direct.h where they apply.
//
// x (B, C, H, W) -> y (B, F, OH, OW), OH = (H + 2P - K) / S + 1 (likewise OW), square kernel K,
// stride S, zero padding P. Weight (F, C, K, K) as in torch.nn.Conv2d, bias (F) optional.
// Per image b, with Q = OH*OW and R = C*K*K:
//   forward   cols_b (R, Q) = im2col(x[b])
//             y[b]   (F, Q) = bias + W (F, R) x cols_b                        2*F*R*Q FLOPs
//   backward  dW^T  (R, F) += cols_b x dy[b]^T (F, Q)^T                       2*F*R*Q FLOPs
//             db    (F)    += row sums of dy[b]
//             dcols (R, Q)  = W^T x dy[b], then dx[b] = col2im(dcols)          2*F*R*Q FLOPs
// y[b] and dy[b] are already (F, Q) matrices, so no reordering is needed. The weight gradient is
// summed transposed (OpenBLAS runs that product faster at LeNet's conv2) and added to dW once per
// part. With stride 1 and 16 < OW <= 32 on an AVX-512 build (LeNet's conv1, CIFAR first layers)
// forward and dW skip im2col and GEMM: conv_direct computes them straight from the image (dW from
// shifted copies of it) near the FMA peak, its dW as 16 partial sums per weight, folded once per
// part. dx of a stride-1
// layer is itself a stride-1 convolution, of dy with the kernel flipped and transposed to (C, F, K,
// K) and padding K - 1 - P; where conv_direct supports that geometry (16 < W <= 32: a ResNet's
// first stage) it computes dx straight from dy, without dcols or col2im.
// Parallelism is over the batch: the images are cut into one contiguous range per compute thread
// (tensor/gemm_serial.h), and each thread runs im2col (tensor/im2col_padded.h for stride 1,
// tensor/im2col_strided.h otherwise), its
// GEMMs and col2im image by image, so one image's cols (R*Q floats: 60 KB for LeNet's conv2) is
// still in L1/L2 when its product reads it. Each part keeps its own dW and db sums, added to the
// gradient in part order at the end: results are bitwise repeatable for a given thread count and
// differ across thread counts only by that summation order (forward and dx do not depend on it).
// Grouping images into one GEMM is not possible without reordering: y[b] (F, Q) of consecutive
// images are not one (F, B*Q) matrix (and measured with OpenBLAS 0.3.21 at conv2's shapes, larger
// products were no faster). cols is recomputed in backward rather than kept (7.7 MB for conv2 at
// batch 128, more than it costs to rebuild from the input).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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
  std::unique_ptr<Layer> clone() const override;
  // (B, C, H, W) -> (B, F, OH, OW); a wrong rank, a channel mismatch or a kernel larger than the
  // padded input is a ShapeError naming the layer and both shapes.
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  // backward(dy, true), with addend (the input's shape, contiguous, not this layer's own dx) added
  // into the returned input gradient: a residual block's sum of its two branches' dx without a pass
  // of its own. With the direct dx kernel the addend is the sums' starting value; otherwise each
  // image's dx gets it added right after col2im, while in cache (the bits of tensor::add).
  const tensor::Tensor& backward_add(const tensor::Tensor& dy, const tensor::Tensor& addend);

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
  // backward and backward_add: addend (B, C, H, W) or null is added into dx.
  const tensor::Tensor& backward_impl(const tensor::Tensor& dy, bool need_input_grad,
                                      const float* addend);
  // cols (R, Q) of one image (C, H, W): im2col_padded for stride 1, im2col_strided otherwise
  // (scratch: one part's row of scratch_).
  void lower(const float* image, float* scratch, float* cols) const;
  // Floats of scratch per part: enough for im2col_padded and for conv_direct (both directions).
  std::int64_t scratch_size() const;
  // dy (F, OH, OW) seen as the input of the convolution that gives dx with the flipped kernel:
  // stride 1, padding K - 1 - P.
  tensor::ConvGeometry input_grad_geometry() const;
  // True when backward computes dx with conv_direct_forward over input_grad_geometry(): stride 1,
  // P <= K - 1 and conv_direct supports that geometry (16 < W <= 32 with AVX-512).
  bool input_grad_direct() const;
  // How many contiguous ranges of images the batch is cut into: the compute threads, fewer for a
  // small pass. Depends on the shapes and the thread count only.
  int batch_parts(std::int64_t batch) const;
  // Runs fn(part, begin, end) for each part's image range [begin, end) on the compute pool.
  void for_each_part(std::int64_t batch, int parts,
                     const std::function<void(int part, std::int64_t begin, std::int64_t end)>& fn);

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
  tensor::Tensor x_;        // view of the last input (B, C, H, W), to recompute cols in backward
  tensor::Tensor cols_;     // (parts, R, Q): one image per part at a time
  tensor::Tensor scratch_;  // (parts, im2col_padded_scratch_size)
  tensor::Tensor dcols_;    // (parts, R, Q)
  tensor::Tensor flipped_weight_;  // (C, F, K, K): w[f, c, K-1-i, K-1-j], for a direct dx
  // (parts, F*R*kConvDirectLanes) conv_direct lanes or (parts, R*F) dW^T: per-part weight-gradient
  // sums over the part's images, see backward().
  tensor::Tensor part_sums_;
  tensor::Tensor dw_parts_;       // (parts, F*R): per-part weight gradients when parts > 1
  std::vector<double> db_parts_;  // (parts, F): per-part bias gradients
  tensor::Tensor y_;              // (B, F, OH, OW)
  tensor::Tensor dx_;             // (B, C, H, W)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
