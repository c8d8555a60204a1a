// TensorParallelModel: one rank's part of a model split over a tensor-parallel group, as the
// builders make it (model_gpt_tensor_parallel.h: Megatron's pairs; model_mlp_tensor_parallel.h:
// seed 003's all-gather form), with what the strategy reports beside its measurements.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/model.h"
#include "dtrain/nn/tensor_parallel_shards.h"

namespace dtrain::nn {

struct TensorParallelModel {
  std::unique_ptr<Model> model;
  // shards[k]: the part of the unsplit tensor model->store().param_entries()[k] holds.
  std::vector<ParamShard> shards;
  // Bytes one rank sends per sample of a step (ring allreduce, ring all-gather), by the formula;
  // a step of B samples sends B times this.
  double bytes_per_sample = 0.0;
  std::string bytes_formula;
  // Collective calls per step (allreduces and all-gathers).
  std::int64_t collectives_per_step = 0;
  std::string collectives_formula;
  // One line: what is split and how (the run banner).
  std::string description;
  std::string parameters_formula;  // parameters per rank
};

}  // namespace dtrain::nn
