// A data set held in memory, decoded and normalised once, and the copy of one mini-batch out of it.
//
// Every reader (IDX, CIFAR-10 binary, synthetic) returns this one struct so that samplers and the
// trainer never care where the images came from. Images are kept as f32 (N, C, H, W) because the
// engine computes in f32 and a batch is then a plain row copy: Fashion-MNIST's training set is
// 60000 x 784 x 4 B = 188 MB, CIFAR-10's 50000 x 3072 x 4 B = 614 MB.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/tensor/tensor.h"

namespace dtrain::data {

// Which half of a data set a reader loads.
enum class Split { kTrain, kTest };

// "train" or "test", for messages.
std::string_view split_name(Split split);

struct Dataset {
  std::string name;                  // "fashion-mnist", "mnist", "cifar10", "synthetic", "text"
  tensor::Tensor images;             // (N, C, H, W) float32, already normalised; text: (N, T)
  std::vector<std::int32_t> labels;  // N x labels_per_sample labels in [0, num_classes)
  std::int64_t num_classes = 10;
  // 1 for images (one class each); T for text windows (the next byte at every position), so
  // sample i's labels are [i L, (i + 1) L).
  std::int64_t labels_per_sample = 1;

  // N, the number of samples (0 for an empty Dataset).
  std::int64_t size() const;
  // The shape of one sample: {C, H, W}, or {T} for text; empty for an empty Dataset.
  tensor::Shape sample_shape() const;
};

// Copies samples `indices` (each in [0, data.size())) into x, (B, sample_shape...) with B =
// indices.size(), and their labels (B x labels_per_sample) into y. x is reshaped through
// Tensor::ensure_shape, so a caller that keeps x across steps allocates only when B changes (the
// last, short batch of an epoch). Cost: B * C*H*W floats copied. An index out of range is a bug in
// the sampler: InternalError.
void gather_batch(const Dataset& data, std::span<const std::int64_t> indices, tensor::Tensor& x,
                  std::vector<std::int32_t>& y);

}  // namespace dtrain::data
