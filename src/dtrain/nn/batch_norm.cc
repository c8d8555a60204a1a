#include "dtrain/nn/batch_norm.h"

#include <algorithm>
#include <cmath>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

// Values per thread below which a second thread costs more than it saves.
constexpr std::int64_t kValueGrain = 1 << 14;

// The spatial size H*W of a (B, F) or (B, F, H, W) shape.
std::int64_t plane_size(const tensor::Shape& shape) {
  return shape.size() == 4 ? shape[2] * shape[3] : 1;
}

// Runs fn(c) for every channel, channels split over the compute pool; each channel is handled by
// exactly one thread in a fixed order, so sums do not depend on the thread count.
template <typename Fn>
void for_each_channel(std::int64_t channels, std::int64_t values_per_channel, const Fn& fn) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kValueGrain / std::max<std::int64_t>(1, values_per_channel));
  compute_pool().parallel_for(channels, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) fn(c);
  });
}

}  // namespace

BatchNorm::BatchNorm(std::string name, std::int64_t features, float momentum, float eps)
    : Layer(std::move(name)), features_(features), momentum_(momentum), eps_(eps) {
  if (features_ <= 0 || !(momentum_ >= 0.0f && momentum_ <= 1.0f) || !(eps_ > 0.0f)) {
    throw ConfigError(fmt::format(
        "layer {}: BatchNorm needs features > 0, momentum in [0, 1] and eps > 0, got {}, {}, {}",
        this->name(), features_, momentum_, eps_));
  }
}

std::string BatchNorm::describe() const {
  return fmt::format("BatchNorm({}, momentum {}, eps {})", features_, momentum_, eps_);
}

tensor::Shape BatchNorm::output_shape(const tensor::Shape& input) const {
  if ((input.size() != 2 && input.size() != 4) || input[1] != features_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, {}] or [B, {}, H, W], got {}; check the previous "
        "layer's output",
        name(), describe(), features_, features_, tensor::batch_shape_str(input)));
  }
  return input;
}

void BatchNorm::declare(ParamStore& store) {
  gamma_index_ = store.add_param(name() + ".weight", {features_}, /*weight_decay=*/false);
  beta_index_ = store.add_param(name() + ".bias", {features_}, /*weight_decay=*/false);
  mean_index_ = store.add_buffer(name() + ".running_mean", {features_});
  var_index_ = store.add_buffer(name() + ".running_var", {features_});
}

void BatchNorm::bind(ParamStore& store) {
  gamma_ = store.param(gamma_index_);
  beta_ = store.param(beta_index_);
  gamma_grad_ = store.grad(gamma_index_);
  beta_grad_ = store.grad(beta_index_);
  running_mean_ = store.buffer(mean_index_);
  running_var_ = store.buffer(var_index_);
}

void BatchNorm::init(Rng& /*rng*/) {
  gamma_.fill(1.0f);
  beta_.zero();
  running_mean_.zero();
  running_var_.fill(1.0f);
}

void BatchNorm::channel_sums(const tensor::Tensor& x, ChannelStats& stats) const {
  output_shape(x.shape());
  const std::int64_t batch = x.dim(0);
  const std::int64_t plane = plane_size(x.shape());
  stats.sum.assign(static_cast<std::size_t>(features_), 0.0);
  stats.sum_sq.assign(static_cast<std::size_t>(features_), 0.0);
  stats.count = batch * plane;
  const float* xd = x.data();
  for_each_channel(features_, stats.count, [&](std::int64_t c) {
    double sum = 0.0, sum_sq = 0.0;
    for (std::int64_t b = 0; b < batch; ++b) {
      const float* in = xd + (b * features_ + c) * plane;
      for (std::int64_t p = 0; p < plane; ++p) {
        const double v = in[p];
        sum += v;
        sum_sq += v * v;
      }
    }
    stats.sum[static_cast<std::size_t>(c)] = sum;
    stats.sum_sq[static_cast<std::size_t>(c)] = sum_sq;
  });
}

const tensor::Tensor& BatchNorm::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  const std::int64_t batch = x.dim(0);
  const std::int64_t plane = plane_size(x.shape());
  mode_ = ctx.mode;
  std::vector<float> mean(static_cast<std::size_t>(features_));
  inv_std_.resize(static_cast<std::size_t>(features_));
  float* run_mean = running_mean_.data();
  float* run_var = running_var_.data();

  if (mode_ == Mode::kTrain) {
    channel_sums(x, stats_);
    if (reducer_ != nullptr) reducer_->reduce_statistics(stats_);
    count_ = stats_.count;
    if (count_ <= 1) {
      throw ShapeError(fmt::format(
          "layer {} ({}): train mode needs more than 1 value per channel to estimate a variance, "
          "got input {} ({} per channel); use a batch of at least 2 or eval mode",
          name(), describe(), tensor::shape_str(x.shape()), count_));
    }
    const double n = static_cast<double>(count_);
    for (std::int64_t c = 0; c < features_; ++c) {
      const auto i = static_cast<std::size_t>(c);
      const double m = stats_.sum[i] / n;
      const double var = std::max(stats_.sum_sq[i] / n - m * m, 0.0);
      mean[i] = static_cast<float>(m);
      inv_std_[i] = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps_)));
      run_mean[c] = static_cast<float>((1.0 - momentum_) * run_mean[c] + momentum_ * m);
      run_var[c] =
          static_cast<float>((1.0 - momentum_) * run_var[c] + momentum_ * var * n / (n - 1.0));
    }
  } else {
    count_ = batch * plane;
    for (std::int64_t c = 0; c < features_; ++c) {
      const auto i = static_cast<std::size_t>(c);
      mean[i] = run_mean[c];
      inv_std_[i] = static_cast<float>(
          1.0 / std::sqrt(static_cast<double>(run_var[c]) + static_cast<double>(eps_)));
    }
  }

  xhat_.ensure_shape(x.shape());
  y_.ensure_shape(x.shape());
  const float* xd = x.data();
  float* xhat = xhat_.data();
  float* y = y_.data();
  const float* gamma = gamma_.data();
  const float* beta = beta_.data();
  for_each_channel(features_, batch * plane, [&](std::int64_t c) {
    const float m = mean[static_cast<std::size_t>(c)];
    const float s = inv_std_[static_cast<std::size_t>(c)];
    const float g = gamma[c], sh = beta[c];
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t offset = (b * features_ + c) * plane;
      for (std::int64_t p = 0; p < plane; ++p) {
        const float h = (xd[offset + p] - m) * s;
        xhat[offset + p] = h;
        y[offset + p] = g * h + sh;
      }
    }
  });
  return y_;
}

const tensor::Tensor& BatchNorm::backward(const tensor::Tensor& dy, bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  const std::int64_t batch = dy.dim(0);
  const std::int64_t plane = plane_size(dy.shape());
  const float* g = dy.data();
  const float* xhat = xhat_.data();
  sum_dy_.assign(static_cast<std::size_t>(features_), 0.0);
  sum_dy_xhat_.assign(static_cast<std::size_t>(features_), 0.0);
  for_each_channel(features_, batch * plane, [&](std::int64_t c) {
    double s1 = 0.0, s2 = 0.0;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t offset = (b * features_ + c) * plane;
      for (std::int64_t p = 0; p < plane; ++p) {
        s1 += g[offset + p];
        s2 += static_cast<double>(g[offset + p]) * xhat[offset + p];
      }
    }
    sum_dy_[static_cast<std::size_t>(c)] = s1;
    sum_dy_xhat_[static_cast<std::size_t>(c)] = s2;
  });
  float* dgamma = gamma_grad_.data();
  float* dbeta = beta_grad_.data();
  for (std::int64_t c = 0; c < features_; ++c) {
    dgamma[c] += static_cast<float>(sum_dy_xhat_[static_cast<std::size_t>(c)]);
    dbeta[c] += static_cast<float>(sum_dy_[static_cast<std::size_t>(c)]);
  }
  if (!need_input_grad) return none_;

  const bool train = mode_ == Mode::kTrain;
  if (train && reducer_ != nullptr) reducer_->reduce_gradient_sums(sum_dy_, sum_dy_xhat_);
  dx_.ensure_shape(dy.shape());
  float* dx = dx_.data();
  const float* gamma = gamma_.data();
  const double n = static_cast<double>(count_);
  for_each_channel(features_, batch * plane, [&](std::int64_t c) {
    const auto i = static_cast<std::size_t>(c);
    const float scale = gamma[c] * inv_std_[i];
    // In eval mode mean and var are constants: dx = scale * dy.
    const float mean_dy = train ? static_cast<float>(sum_dy_[i] / n) : 0.0f;
    const float mean_dy_xhat = train ? static_cast<float>(sum_dy_xhat_[i] / n) : 0.0f;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t offset = (b * features_ + c) * plane;
      for (std::int64_t p = 0; p < plane; ++p) {
        dx[offset + p] = scale * (g[offset + p] - mean_dy - xhat[offset + p] * mean_dy_xhat);
      }
    }
  });
  return dx_;
}

void GroupBatchNormReducer::reduce_statistics(ChannelStats& stats) {
  // (sum (F), sum_sq (F), count): one allreduce. The count is exact in a double up to 2^53.
  const std::size_t f = stats.sum.size();
  buffer_.resize(2 * f + 1);
  std::copy(stats.sum.begin(), stats.sum.end(), buffer_.begin());
  std::copy(stats.sum_sq.begin(), stats.sum_sq.end(), buffer_.begin() + static_cast<long>(f));
  buffer_[2 * f] = static_cast<double>(stats.count);
  group_.allreduce_sum(buffer_.data(), static_cast<std::int64_t>(buffer_.size()));
  std::copy(buffer_.begin(), buffer_.begin() + static_cast<long>(f), stats.sum.begin());
  std::copy(buffer_.begin() + static_cast<long>(f), buffer_.begin() + static_cast<long>(2 * f),
            stats.sum_sq.begin());
  stats.count = static_cast<std::int64_t>(buffer_[2 * f]);
}

void GroupBatchNormReducer::reduce_gradient_sums(std::vector<double>& sum_dy,
                                                 std::vector<double>& sum_dy_xhat) {
  const std::size_t f = sum_dy.size();
  buffer_.resize(2 * f);
  std::copy(sum_dy.begin(), sum_dy.end(), buffer_.begin());
  std::copy(sum_dy_xhat.begin(), sum_dy_xhat.end(), buffer_.begin() + static_cast<long>(f));
  group_.allreduce_sum(buffer_.data(), static_cast<std::int64_t>(buffer_.size()));
  std::copy(buffer_.begin(), buffer_.begin() + static_cast<long>(f), sum_dy.begin());
  std::copy(buffer_.begin() + static_cast<long>(f), buffer_.end(), sum_dy_xhat.begin());
}

std::unique_ptr<Layer> BatchNorm::clone() const {
  auto copy = std::make_unique<BatchNorm>(name(), features_, momentum_, eps_);
  copy->reducer_ = reducer_;  // a synchronized batch norm stays synchronized in every slot
  return copy;
}

}  // namespace dtrain::nn
