#include "dtrain/nn/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/nn/fast_math.h"

namespace dtrain::nn {
namespace {

// Rows of at least this many elements per slice of the compute pool.
constexpr std::int64_t kLossGrainElements = 16384;

// Checks logits (B, C) (or (B, ..., C): numel / C rows) against one label per row; returns C.
std::int64_t check_logits(const char* what, const tensor::Tensor& logits,
                          std::span<const std::int32_t> labels) {
  if (logits.ndim() < 2 || logits.dim(-1) < 1) {
    throw ShapeError(fmt::format("{}: logits must be [B, C] with C >= 1, got {}", what,
                                 tensor::shape_str(logits.shape())));
  }
  const std::int64_t rows = logits.numel() / logits.dim(-1);
  if (static_cast<std::int64_t>(labels.size()) != rows) {
    throw ShapeError(fmt::format("{}: logits {} need {} labels, got {}", what,
                                 tensor::shape_str(logits.shape()), rows, labels.size()));
  }
  DTRAIN_CHECK(logits.is_contiguous(), "{}: logits must be contiguous", what);
  return logits.dim(-1);
}

// A row of n floats owned by the calling thread, reused across calls.
float* scratch_row(std::int64_t n) {
  thread_local std::vector<float> row;
  if (static_cast<std::int64_t>(row.size()) < n) row.resize(static_cast<std::size_t>(n));
  return row.data();
}

}  // namespace

float softmax_cross_entropy(const tensor::Tensor& logits, std::span<const std::int32_t> labels,
                            tensor::Tensor* dlogits) {
  const std::int64_t classes = check_logits("softmax_cross_entropy", logits, labels);
  const std::int64_t batch = logits.numel() / classes;  // rows
  if (batch == 0) {
    throw ShapeError("softmax_cross_entropy: empty batch (logits [0, C]); the mean is undefined");
  }
  for (std::size_t b = 0; b < labels.size(); ++b) {
    if (labels[b] < 0 || labels[b] >= classes) {
      throw DataError(fmt::format(
          "softmax_cross_entropy: label[{}] = {} out of range [0, {}); check that the data set's "
          "classes match model.num_classes",
          b, labels[b], classes));
    }
  }
  if (dlogits != nullptr) dlogits->ensure_shape(logits.shape());
  // Each row's -log softmax[label], kept per row so that the total is summed in row order whatever
  // the slicing; reused across calls (a training step allocates nothing after the first).
  thread_local std::vector<double> row_loss;
  row_loss.resize(static_cast<std::size_t>(batch));
  double* row_loss_data = row_loss.data();
  const float inv_batch = static_cast<float>(1.0 / static_cast<double>(batch));
  const float* logit_data = logits.data();
  float* grad_data = dlogits != nullptr ? dlogits->data() : nullptr;
  const std::int64_t grain = std::max<std::int64_t>(1, kLossGrainElements / classes);
  compute_pool().parallel_for(batch, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const float* row = logit_data + b * classes;
      const float max = lane_max(row, classes);
      // e^(row - max) into the gradient row (or a scratch row), summed from there: the same
      // stored values in the same order either way, so the loss does not depend on whether the
      // gradient is asked for (an on-the-fly sum could fuse exp's last multiply into the add).
      float* exps = grad_data != nullptr ? grad_data + b * classes : scratch_row(classes);
      for (std::int64_t c = 0; c < classes; ++c) exps[c] = fast_exp(row[c] - max);
      const float sum = lane_sum(classes, [&](std::int64_t c) { return exps[c]; });
      const std::int64_t label = labels[static_cast<std::size_t>(b)];
      if (grad_data != nullptr) {
        // (p - onehot) / B.
        const float scale = inv_batch / sum;
        for (std::int64_t c = 0; c < classes; ++c) exps[c] *= scale;
        exps[label] -= inv_batch;
      }
      // -log softmax[label] = log sum exp(row - max) - (row[label] - max)
      row_loss_data[b] = std::log(static_cast<double>(sum)) - static_cast<double>(row[label] - max);
    }
  });
  double total = 0.0;
  for (std::int64_t b = 0; b < batch; ++b) total += row_loss_data[b];
  return static_cast<float>(total / static_cast<double>(batch));
}

float mse_loss(const tensor::Tensor& pred, const tensor::Tensor& target, tensor::Tensor* dpred) {
  if (pred.shape() != target.shape()) {
    throw ShapeError(fmt::format("mse_loss: prediction {} and target {} differ in shape",
                                 tensor::shape_str(pred.shape()),
                                 tensor::shape_str(target.shape())));
  }
  const std::int64_t n = pred.numel();
  if (n == 0) {
    throw ShapeError(fmt::format("mse_loss: empty prediction {}; the mean is undefined",
                                 tensor::shape_str(pred.shape())));
  }
  DTRAIN_CHECK(pred.is_contiguous() && target.is_contiguous(),
               "mse_loss: inputs must be contiguous");
  if (dpred != nullptr) dpred->ensure_shape(pred.shape());
  const float* p = pred.data();
  const float* t = target.data();
  const double inv_n = 1.0 / static_cast<double>(n);
  const float grad_scale = static_cast<float>(2.0 * inv_n);
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float diff = p[i] - t[i];
    total += static_cast<double>(diff) * diff;
    if (dpred != nullptr) dpred->data()[i] = grad_scale * diff;
  }
  return static_cast<float>(total * inv_n);
}

std::int64_t count_correct(const tensor::Tensor& logits, std::span<const std::int32_t> labels) {
  const std::int64_t classes = check_logits("count_correct", logits, labels);
  std::int64_t correct = 0;
  for (std::int64_t b = 0; b < logits.numel() / classes; ++b) {
    const float* row = logits.data() + b * classes;
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < classes; ++c) {
      if (row[c] > row[best]) best = c;
    }
    if (best == labels[static_cast<std::size_t>(b)]) ++correct;
  }
  return correct;
}

}  // namespace dtrain::nn
