#include "dtrain/nn/loss.h"

#include <cmath>

#include "dtrain/base/error.h"

namespace dtrain::nn {
namespace {

// Checks logits (B, C) against B labels; returns C.
std::int64_t check_logits(const char* what, const tensor::Tensor& logits,
                          std::span<const std::int32_t> labels) {
  if (logits.ndim() != 2 || logits.dim(1) < 1) {
    throw ShapeError(fmt::format("{}: logits must be [B, C] with C >= 1, got {}", what,
                                 tensor::shape_str(logits.shape())));
  }
  if (static_cast<std::int64_t>(labels.size()) != logits.dim(0)) {
    throw ShapeError(fmt::format("{}: logits {} need {} labels, got {}", what,
                                 tensor::shape_str(logits.shape()), logits.dim(0), labels.size()));
  }
  DTRAIN_CHECK(logits.is_contiguous(), "{}: logits must be contiguous", what);
  return logits.dim(1);
}

}  // namespace

float softmax_cross_entropy(const tensor::Tensor& logits, std::span<const std::int32_t> labels,
                            tensor::Tensor* dlogits) {
  const std::int64_t classes = check_logits("softmax_cross_entropy", logits, labels);
  const std::int64_t batch = logits.dim(0);
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
  const double inv_batch = 1.0 / static_cast<double>(batch);
  double total = 0.0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const float* row = logits.data() + b * classes;
    float max = row[0];
    for (std::int64_t c = 1; c < classes; ++c) max = std::fmax(max, row[c]);
    double sum = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c] - max));
    const double log_sum = std::log(sum);
    const std::int64_t label = labels[static_cast<std::size_t>(b)];
    // -log softmax[label] = log sum exp(row - max) - (row[label] - max)
    total += log_sum - static_cast<double>(row[label] - max);
    if (dlogits != nullptr) {
      float* grad = dlogits->data() + b * classes;
      for (std::int64_t c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(row[c] - max) - log_sum);
        grad[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) * inv_batch);
      }
    }
  }
  return static_cast<float>(total * inv_batch);
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
  for (std::int64_t b = 0; b < logits.dim(0); ++b) {
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
