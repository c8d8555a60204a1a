#include "dtrain/nn/model_mlp_tensor_parallel.h"

#include <fmt/format.h>

#include <string>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/all_gather_linear.h"
#include "dtrain/nn/dropout.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/init.h"

namespace dtrain::nn {

TensorParallelModel build_mlp_tensor_parallel(const ModelSpec& spec, GroupComm& group) {
  const int p = group.size();
  // build_mlp's own checks (shapes, widths, dropout, names) first, on the unsplit model.
  build_mlp(spec);
  std::vector<std::int64_t> widths{1};
  for (const std::int64_t d : spec.input) widths[0] *= d;
  for (const std::int64_t h : spec.hidden) widths.push_back(h);
  widths.push_back(spec.num_classes);
  for (std::size_t i = 1; i < widths.size(); ++i) {
    if (widths[i] % p != 0) {
      const bool classes = i + 1 == widths.size();
      throw ConfigError(fmt::format(
          "tensor_parallel: layer fc{} has {} outputs ({}), which cannot be split over {} ranks "
          "(not divisible); use a rank count that divides every width",
          i, widths[i], classes ? "model.num_classes" : "model.hidden", p));
    }
  }
  const ActivationKind activation = parse_activation(spec.activation);
  const InitKind init = parse_init(spec.init);
  auto model = std::make_unique<Model>(spec.input);
  model->add(std::make_unique<Flatten>("flatten"));
  for (std::size_t i = 1; i < widths.size(); ++i) {
    const std::string index = std::to_string(i);
    model->add(std::make_unique<AllGatherLinear>("fc" + index, widths[i - 1], widths[i], group,
                                                 init, spec.init_sigma));
    if (i + 1 == widths.size()) break;
    model->add(std::make_unique<Activation>("act" + index, activation, spec.activation_alpha));
    if (spec.dropout > 0.0f) model->add(std::make_unique<Dropout>("drop" + index, spec.dropout));
  }
  model->build();
  TensorParallelModel result;
  for (std::size_t k = 0; k < model->store().param_entries().size(); ++k) {
    result.shards.push_back({ShardKind::kRows, 1});
  }
  result.model = std::move(model);
  const double share = static_cast<double>(p - 1) / p;
  const std::int64_t layers = static_cast<std::int64_t>(widths.size()) - 1;
  for (std::size_t i = 1; i < widths.size(); ++i) {
    result.bytes_per_sample += share * 4.0 * static_cast<double>(widths[i]);
    if (i >= 2) result.bytes_per_sample += 2.0 * share * 4.0 * static_cast<double>(widths[i - 1]);
  }
  result.bytes_formula =
      "sum_i (P-1)/P x 4 B d_i (all-gathers) + sum_{i>=2} 2 (P-1)/P x 4 B d_{i-1} (allreduces): "
      "seed 003";
  result.collectives_per_step = 2 * layers - 1;
  result.collectives_formula = "K all-gathers + K - 1 allreduces";
  result.description = fmt::format(
      "allgather (seed 003): each of {} Linear layers holds 1/{} of its outputs per rank, "
      "activations all-gathered, their gradients all-reduced",
      layers, p);
  result.parameters_formula = "sum_i (d_{i-1} + 1) d_i / P";
  return result;
}

}  // namespace dtrain::nn
