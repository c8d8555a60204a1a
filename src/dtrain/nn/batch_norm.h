// BatchNorm: batch normalization (Ioffe & Szegedy, 2015) over (B, F) features or (B, F, H, W)
// images, one class for both (BatchNorm1d and BatchNorm2d of PyTorch).
//
// Per channel c, over the N = B*H*W values x of that channel (H = W = 1 for 2-D input):
//   train: mean = sum(x) / N, var = sum((x - mean)^2) / N (biased, used to normalize)
//          running_mean = (1 - m) running_mean + m mean
//          running_var  = (1 - m) running_var  + m var * N / (N - 1)   (unbiased, as PyTorch)
//   eval:  mean = running_mean, var = running_var
//   xhat = (x - mean) / sqrt(var + eps),  y = gamma xhat + beta
// Backward, exact (train mode; mean and var depend on x):
//   dbeta  += sum(dy),  dgamma += sum(dy xhat)
//   dx = gamma / sqrt(var + eps) * (dy - sum(dy) / N - xhat sum(dy xhat) / N)
// and in eval mode dx = gamma / sqrt(var + eps) * dy.
// gamma (".weight", init 1) and beta (".bias", init 0) are trained without weight decay;
// running_mean (init 0) and running_var (init 1) are store buffers, saved with checkpoints.
//
// Hook for a synchronized batch norm: the statistics are sums, so data-parallel ranks can agree on
// them with one allreduce. forward computes the local per-channel sums of x and x^2 and the count
// (channel_sums(), in double), then calls reduce_statistics(); backward computes the local sums of
// dy and dy*xhat, adds them to dbeta/dgamma (the parameter gradients stay local, averaged later
// with all other gradients), then calls reduce_gradient_sums() before forming dx. Both do nothing
// until set_reducer() installs a BatchNormReducer; parallel/'s synchronized batch norm installs one
// that allreduces (nn/ never talks to comm/), and every formula above then uses the global N and
// sums. An injected reducer rather than a subclass: the model zoo builds plain BatchNorm layers and
// data parallelism switches them to synchronized ones after the fact.
// var comes from sum(x^2)/N - mean^2 in double: exact enough for f32 activations (the cancellation
// costs log10(mean^2/var) of double's 16 digits) and what lets the statistics be summed.
// Cost: forward reads x twice and writes y; backward reads x and dy twice and writes dx (xhat is
// not stored: backward recomputes it from a view of x, the same bits); channels are split over the
// compute pool. Without a reducer each channel is normalized right after its sums (forward) and its
// dx follows its sums (backward) while its B*H*W values are still in L2, so the second read of
// each comes from cache. A channel's planes are F planes apart, so every pass prefetches the planes
// it reads next (batch_norm.cc: the hardware prefetchers restart at each plane). With a fused ReLU
// (set_fused_relu) the mask comes from the recomputed gamma xhat + beta (one fma, as forward rounds
// it), not from a stored output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

// Per-channel sufficient statistics of a batch: sum of x, sum of x^2, values per channel.
struct ChannelStats {
  std::vector<double> sum;
  std::vector<double> sum_sq;
  std::int64_t count = 0;
};

// Sums per-channel quantities over the ranks of a synchronized batch norm (in place).
class BatchNormReducer {
 public:
  virtual ~BatchNormReducer() = default;
  virtual void reduce_statistics(ChannelStats& stats) = 0;
  virtual void reduce_gradient_sums(std::vector<double>& sum_dy,
                                    std::vector<double>& sum_dy_xhat) = 0;
};

// The sums of a synchronized batch norm over the ranks of a GroupComm (group_comm.h): one
// allreduce of (sum x, sum x^2, count), 2F + 1 doubles, in forward; one of (sum dy, sum dy xhat),
// 2F doubles, in backward. parallel::sync_batch_norm installs one over the data-parallel ranks.
class GroupBatchNormReducer : public BatchNormReducer {
 public:
  // `group` must outlive the reducer.
  explicit GroupBatchNormReducer(GroupComm& group) : group_(group) {}
  void reduce_statistics(ChannelStats& stats) override;
  void reduce_gradient_sums(std::vector<double>& sum_dy, std::vector<double>& sum_dy_xhat) override;

 private:
  GroupComm& group_;
  std::vector<double> buffer_;
};

class BatchNorm : public Layer {
 public:
  BatchNorm(std::string name, std::int64_t features, float momentum = 0.1f, float eps = 1e-5f);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, F) or (B, F, H, W) -> the same; another rank or F is a ShapeError.
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  // forward(x), then y = max(y + shortcut, 0) in the same pass (shortcut: x's shape, contiguous,
  // not this layer's output): a residual block's last batch norm, sum and ReLU (nn::ResidualBlock),
  // the same bits as tensor::add_relu after forward, one pass over the output fewer. backward is
  // unchanged: it takes the gradient at the batch norm's own output, so the caller applies the
  // ReLU's mask (from this output) first, as before.
  const tensor::Tensor& forward_add_relu(const tensor::Tensor& x, const tensor::Tensor& shortcut,
                                         const ForwardContext& ctx);

  // The local statistics of x (B, F, ...) per channel, as forward uses them in train mode.
  void channel_sums(const tensor::Tensor& x, ChannelStats& stats) const;

  std::int64_t features() const { return features_; }
  float momentum() const { return momentum_; }
  float eps() const { return eps_; }
  // Views into the store, valid after bind(), each (F).
  const tensor::Tensor& weight() const { return gamma_; }
  const tensor::Tensor& bias() const { return beta_; }
  const tensor::Tensor& running_mean() const { return running_mean_; }
  const tensor::Tensor& running_var() const { return running_var_; }

  // Makes this a synchronized batch norm (see the header comment); null switches back. The reducer
  // must outlive its use.
  void set_reducer(BatchNormReducer* reducer) { reducer_ = reducer; }
  BatchNormReducer* reducer() const { return reducer_; }
  // Fuses a ReLU into the output: forward gives max(gamma xhat + beta, 0) and backward takes the
  // gradient of that (dy where the output is > 0, else 0), the same values as this layer followed
  // by an Activation("relu") or tensor::relu / relu_backward, one pass over the tensor fewer each
  // way. nn::ResidualBlock sets it on its bn1.
  void set_fused_relu(bool on) { relu_ = on; }
  bool fused_relu() const { return relu_; }

 private:
  // The ShapeError for count_ <= 1 in train mode (no variance to estimate).
  void check_count(const tensor::Shape& input) const;

  BatchNormReducer* reducer_ = nullptr;
  bool relu_ = false;
  const float* residual_ = nullptr;  // forward_add_relu's shortcut, during that call only
  std::int64_t features_;
  float momentum_;
  float eps_;
  int gamma_index_ = -1, beta_index_ = -1, mean_index_ = -1, var_index_ = -1;
  tensor::Tensor gamma_, beta_, gamma_grad_, beta_grad_;  // views into the ParamStore
  tensor::Tensor running_mean_, running_var_;             // views into the store's buffers
  Mode mode_ = Mode::kTrain;                              // of the last forward
  std::int64_t count_ = 0;  // N of the last forward (global in a synchronized batch norm)
  ChannelStats stats_;
  std::vector<float> mean_, inv_std_;  // (F) of the last forward
  std::vector<double> sum_dy_, sum_dy_xhat_;
  tensor::Tensor x_;   // view of the last input: backward recomputes xhat from it
  tensor::Tensor y_;   // same shape as x
  tensor::Tensor dx_;  // same shape as x
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
