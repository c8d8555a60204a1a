// The size of a model of the zoo (model_zoo.h) from its spec alone, without building it: what a
// run checks against the memory it has before build_model allocates (train/memory_budget.h).
//
// Closed forms per builder (each builder's header comment gives the same sums):
//   mlp     sum over the dense layers of (in + 1) out
//   lenet5  conv1 6(25 C + 1), conv2 16(150 + 1), fc1 (flat + 1) 120, fc2 121 x 84, fc3 85 K, with
//           flat from the layers' own output shapes
//   resnet  conv1 9 C w, each BatchNorm 2 F parameters and 2 F buffers, each ResidualBlock
//           9 (C F + F F) (+ C F and a BatchNorm for a projection), fc (4 w + 1) K
//   gpt     gpt_parameter_count(spec)
//   layers  the list's layers built and declared, not allocated (layer_list_size)
// Counts saturate at INT64_MAX instead of overflowing (a width of 10^10 is a typo, not a model).
// tests/nn/parameter_count_test.cc compares every form with the built model's ParamStore.
#pragma once

#include <cstdint>
#include <optional>

#include "dtrain/nn/model_zoo.h"

namespace dtrain::nn {

struct ModelSize {
  std::int64_t parameters = 0;  // trained elements (ParamStore::num_params)
  std::int64_t buffers = 0;     // untrained elements (batch-norm running statistics)
};

// The size build_model(spec) would have; nullopt when the spec is not one build_model accepts (an
// unknown name, a width <= 0, an input too small): build_model then reports what is wrong.
std::optional<ModelSize> count_model_size(const ModelSpec& spec);

}  // namespace dtrain::nn
