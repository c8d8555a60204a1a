// Cutting a model's layer list into contiguous pipeline stages (GPipe, PipeDream, DeepSpeed's
// PipelineModule partition_method = "uniform" / "parameters" / measured).
//
// A stage is a LayerRange of Model::layers(); a composite layer (a residual block, a transformer
// block) is one layer and is never cut. Every stage gets at least one layer, so a model with fewer
// layers than stages is refused (ConfigError naming both numbers).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "dtrain/nn/model.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::nn {

// `stages` ranges of L / stages layers, the first L % stages of them one layer longer
// (10 layers over 4 stages: 3, 3, 2, 2).
std::vector<LayerRange> partition_by_count(std::size_t layers, int stages);

// The contiguous cut of layers with `costs` (seconds, FLOPs: any additive cost) into `stages`
// non-empty ranges that minimizes the largest stage cost, the pipeline's step time in the steady
// state (exact: dynamic programming over the cut points, O(stages L^2)). Among equally good cuts
// each stage starts as early as it can (later stages take the extra layers); the result is a pure
// function of the costs, so ranks that agree on the costs agree on the cut.
std::vector<LayerRange> partition_balanced(std::span<const double> costs, int stages);

// Measured forward + backward seconds of each layer on `batch` (one micro-batch of inputs, e.g.
// zeros of (B, sample_shape...)), the median of `repeats` runs after one warm-up, timed with the
// forward hook (before_layer) and backward's after_layer. The model's buffers (batch-norm running
// statistics) are restored and its gradients zeroed afterwards; parameters are untouched.
std::vector<double> measure_layer_costs(Model& model, const tensor::Tensor& batch, int repeats = 3);

}  // namespace dtrain::nn
