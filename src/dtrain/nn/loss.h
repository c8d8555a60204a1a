// Losses and the accuracy count: the scalar a training step minimises and its gradient with
// respect to the model's output, which is where Model::backward starts.
//
// Both losses are means (over the batch, over all elements), so the gradient scale does not
// depend on the batch size and a data-parallel allreduce of per-rank mean gradients divided by the
// rank count equals the gradient of the global batch when the shards are equal.
#pragma once

#include <cstdint>
#include <span>

#include "dtrain/tensor/tensor.h"

namespace dtrain::nn {

// L = -(1/B) sum_b log softmax(logits_b)[label_b]                 logits (B, C), labels (B)
// dlogits = (softmax(logits) - onehot(labels)) / B                (B, C), written when not null
//
// Numerically stable: each row is shifted by its maximum before exp, so logits of 1e4 or -1e4 give
// finite values, and log-sum-exp is accumulated in double. Cost: B*C exp.
// A label outside [0, C) is a DataError naming the sample index and value (before any output is
// written); a batch of labels of another length, or logits that are not 2-D, a ShapeError.
float softmax_cross_entropy(const tensor::Tensor& logits, std::span<const std::int32_t> labels,
                            tensor::Tensor* dlogits);

// L = (1/N) sum_i (pred_i - target_i)^2 over all N elements       pred, target: the same shape
// dpred = 2 (pred - target) / N                                   written when not null
// Shapes that differ are a ShapeError with both shapes.
float mse_loss(const tensor::Tensor& pred, const tensor::Tensor& target, tensor::Tensor* dpred);

// How many rows of logits (B, C) have their argmax equal to the label; ties go to the lowest
// class index (the first maximum), so the count is deterministic.
std::int64_t count_correct(const tensor::Tensor& logits, std::span<const std::int32_t> labels);

}  // namespace dtrain::nn
