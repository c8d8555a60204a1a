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
// Logits of higher rank, (B, T, ..., C), are read as B = numel / C rows of C with one label per row
// in row order: a language model's (B, T, V) logits take B*T labels, and L is the mean over
// tokens (nats per token), exactly the loss of the same logits reshaped to (B*T, V).
// Numerically stable: each row is shifted by its maximum before exp, so logits of 1e4 or -1e4 give
// finite values. The exps are f32 (nn/fast_math.h, within 1e-7 relative, vectorised), each row's
// sum of them is taken in 16 f32 lanes, and the rows' log-sum-exp terms are summed in double, in
// row order; rows are split over the compute pool, and the result does not depend on the thread
// count. Cost: numel exps (one per element, shared by the loss and the gradient). A label outside
// [0, C) is a DataError naming the row index and value (before any output is written); a batch of
// labels of another length, or logits of rank < 2, a ShapeError.
float softmax_cross_entropy(const tensor::Tensor& logits, std::span<const std::int32_t> labels,
                            tensor::Tensor* dlogits);

// L = (1/N) sum_i (pred_i - target_i)^2 over all N elements       pred, target: the same shape
// dpred = 2 (pred - target) / N                                   written when not null
// Shapes that differ are a ShapeError with both shapes.
float mse_loss(const tensor::Tensor& pred, const tensor::Tensor& target, tensor::Tensor* dpred);

// How many rows of logits (B, C) have their argmax equal to the label; ties go to the lowest
// class index (the first maximum), so the count is deterministic. Higher ranks as above: numel / C
// rows, one label each.
std::int64_t count_correct(const tensor::Tensor& logits, std::span<const std::int32_t> labels);

}  // namespace dtrain::nn
