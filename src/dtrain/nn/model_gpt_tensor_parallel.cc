#include "dtrain/nn/model_gpt_tensor_parallel.h"

#include <fmt/format.h>

#include <string>

#include "dtrain/base/error.h"
#include "dtrain/nn/embedding.h"
#include "dtrain/nn/layer_norm.h"
#include "dtrain/nn/parallel_transformer_block.h"
#include "dtrain/nn/tied_output_head.h"

namespace dtrain::nn {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The shard of a tensor of a split block (make_parallel_transformer_block), by its name.
ParamShard shard_by_name(const std::string& name) {
  if (ends_with(name, ".attn.qkv.weight") || ends_with(name, ".attn.qkv.bias")) {
    return {ShardKind::kRows, 3};
  }
  if (ends_with(name, ".fc.weight") || ends_with(name, ".fc.bias")) return {ShardKind::kRows, 1};
  if (ends_with(name, ".attn.proj.weight") || ends_with(name, ".out.weight")) {
    return {ShardKind::kColumns, 1};
  }
  return {ShardKind::kReplicated, 1};
}

}  // namespace

void check_gpt_tensor_split(const ModelSpec& spec, int parts) {
  if (parts < 1 || spec.heads % parts != 0) {
    throw ConfigError(fmt::format(
        "tensor_parallel: model.heads = {} cannot be split over {} ranks (each rank takes whole "
        "heads, heads % ranks = {}); use a rank count that divides {}, or change model.heads",
        spec.heads, parts, parts >= 1 ? spec.heads % parts : spec.heads, spec.heads));
  }
}

TensorParallelModel build_gpt_tensor_parallel(const ModelSpec& spec, GroupComm& group) {
  if (spec.name != "gpt") {
    throw ConfigError(fmt::format(
        "tensor_parallel splits model.name = \"gpt\" (its attention by heads, its MLP by hidden "
        "units), got \"{}\"",
        spec.name));
  }
  check_gpt_tensor_split(spec, group.size());
  // build_gpt's checks (positive sizes, heads dividing d) on the unsplit spec.
  if (spec.d_model % spec.heads != 0 || spec.vocab <= 0 || spec.block <= 0 || spec.layers <= 0) {
    throw ConfigError(fmt::format(
        "model: d_model = {}, heads = {}, vocab = {}, block = {}, layers = {} is not a GPT "
        "(heads must divide d_model, all positive)",
        spec.d_model, spec.heads, spec.vocab, spec.block, spec.layers));
  }
  const std::int64_t d = spec.d_model;
  auto model = std::make_unique<Model>(tensor::Shape{spec.block});
  auto embed = std::make_unique<Embedding>("embed", spec.vocab, spec.block, d, 0.02f);
  const std::string tied = embed->token_weight_name();
  model->add(std::move(embed));
  for (std::int64_t i = 1; i <= spec.layers; ++i) {
    model->add(make_parallel_transformer_block(fmt::format("block{}", i), d, spec.heads, spec.block,
                                               group));
  }
  model->add(std::make_unique<LayerNorm>("ln_f", d));
  model->add(std::make_unique<TiedOutputHead>("head", tied, d, spec.vocab));
  model->build();
  TensorParallelModel result;
  for (const auto& entry : model->store().param_entries()) {
    result.shards.push_back(shard_by_name(entry.name));
  }
  result.model = std::move(model);
  const int p = group.size();
  const double share = 2.0 * (p - 1) / p;
  // 4 allreduces per block of T d floats per sample (T = block: text windows are whole blocks).
  result.bytes_per_sample = 4.0 * static_cast<double>(spec.layers) * share * 4.0 *
                            static_cast<double>(spec.block) * static_cast<double>(d);
  result.bytes_formula =
      "4 L x 2 (P-1)/P x 4 B T d (ring allreduce: seed 003's 2 (P-1)/P B d_i per allreduce, 4 "
      "bytes a float)";
  result.collectives_per_step = 4 * spec.layers;
  result.collectives_formula = "4 L allreduces";
  result.description = fmt::format(
      "megatron: each of {} blocks with {}/{} heads and {}/{} MLP units per rank (qkv, fc "
      "column-parallel; proj, out row-parallel; embedding, LayerNorms, head replicated)",
      spec.layers, spec.heads / p, spec.heads, 4 * d / p, 4 * d);
  result.parameters_formula = "V d + block d + 2 d + L (12 d^2 / P + 7 d / P + 6 d)";
  return result;
}

}  // namespace dtrain::nn
