#include "dtrain/nn/layer_list_tensor_parallel.h"

#include <fmt/format.h>

#include <limits>
#include <map>
#include <variant>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/all_gather_linear.h"
#include "dtrain/nn/column_parallel_linear.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/parallel_causal_self_attention.h"
#include "dtrain/nn/parallel_transformer_block.h"
#include "dtrain/nn/row_parallel_linear.h"
#include "dtrain/nn/tensor_parallel_cost.h"

namespace dtrain::nn {
namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

// Kinds that act on each element alone: between a column- and a row-parallel Linear they run on
// this rank's slice of the hidden units and give what one worker's would there.
bool elementwise(const std::string& kind) {
  return kind == "relu" || kind == "sigmoid" || kind == "tanh" || kind == "softplus" ||
         kind == "gelu" || kind == "leaky_relu" || kind == "elu";
}

// Replaces the list's linears, attentions and transformer blocks (groups' too) by their split twins
// and records which part of each unsplit tensor they hold.
class Splitter final : public LayerSubstitute {
 public:
  Splitter(GroupComm& group, LinearSplit linears) : group_(group), linears_(linears) {}

  std::unique_ptr<Layer> substitute(const LayerSite& site, const Layer& unsplit) override {
    const std::string& kind = site.list[site.index].kind;
    if (kind == "linear") return linear(site, dynamic_cast<const Linear&>(unsplit));
    if (kind == "transformer_block" || kind == "attention") return attention(site, kind);
    return nullptr;
  }

  std::map<std::string, ParamShard> shards;  // tensor name -> its part (absent: replicated)
  int all_gathered = 0, pairs = 0, replicated_linears = 0, blocks = 0, attentions = 0;

 private:
  // detail: where the count comes from, "out_features = 6".
  void check_divides(const LayerSite& site, std::int64_t count, const std::string& what,
                     const std::string& detail) const {
    const int p = group_.size();
    if (count % p == 0) return;
    throw ConfigError(fmt::format(
        "tensor_parallel: {} '{}' has {} {} ({}), which cannot be split over {} ranks ({} % {} = "
        "{}); use a rank count that divides {}, or change out_features",
        site.label, site.name, count, what, detail, p, count, p, count % p, count));
  }

  std::string out_key(const LayerSite& site, std::int64_t out) const {
    const auto& params = site.list[site.index].params;
    const auto it = params.find("out_features");
    if (it != params.end() && std::holds_alternative<std::string>(it->second)) {
      return fmt::format("out_features = \"classes\": the data set's {}", out);
    }
    return fmt::format("out_features = {}", out);
  }

  std::unique_ptr<Layer> linear(const LayerSite& site, const Linear& unsplit) {
    const std::int64_t in = unsplit.in_features();
    const std::int64_t out = unsplit.out_features();
    const std::string& name = site.name;
    if (partner_list_ == &site.list && row_partner_ == site.index) {
      // The second half of a pair: its input is the column-parallel half's slice.
      partner_list_ = nullptr;
      row_partner_ = kNone;
      ++pairs;
      shards[name + ".weight"] = {ShardKind::kColumns, 1};
      return std::make_unique<RowParallelLinear>(name, in, out, group_);
    }
    if (linears_ == LinearSplit::kAllGather) {
      check_divides(site, out, "outputs", out_key(site, out));
      shards[name + ".weight"] = {ShardKind::kRows, 1};
      shards[name + ".bias"] = {ShardKind::kRows, 1};
      ++all_gathered;
      return std::make_unique<AllGatherLinear>(name, in, out, group_);
    }
    std::size_t next = site.index + 1;
    while (next < site.list.size() && elementwise(site.list[next].kind)) ++next;
    if (next >= site.list.size() || site.list[next].kind != "linear") {
      ++replicated_linears;
      return nullptr;
    }
    check_divides(site, out, "hidden units", out_key(site, out));
    partner_list_ = &site.list;
    row_partner_ = next;
    shards[name + ".weight"] = {ShardKind::kRows, 1};
    shards[name + ".bias"] = {ShardKind::kRows, 1};
    return std::make_unique<ColumnParallelLinear>(name, in, out, group_);
  }

  std::unique_ptr<Layer> attention(const LayerSite& site, const std::string& kind) {
    // The builder checked the input, (1, T, d), and that heads divides d.
    const std::int64_t heads = std::get<std::int64_t>(site.list[site.index].params.at("heads"));
    const int p = group_.size();
    if (heads % p != 0) {
      throw ConfigError(fmt::format(
          "tensor_parallel: {} '{}' has heads = {}, which cannot be split over {} ranks (each "
          "rank takes whole heads; {} % {} = {}); use a rank count that divides {}, or change "
          "heads",
          site.label, site.name, heads, p, heads, p, heads % p, heads));
    }
    const std::int64_t block = site.input[1];
    const std::int64_t dim = site.input[2];
    const std::string& name = site.name;
    if (kind == "attention") {
      shards[name + ".qkv.weight"] = {ShardKind::kRows, 3};
      shards[name + ".qkv.bias"] = {ShardKind::kRows, 3};
      shards[name + ".proj.weight"] = {ShardKind::kColumns, 1};
      ++attentions;
      return std::make_unique<ParallelCausalSelfAttention>(name, dim, heads, block, group_);
    }
    shards[name + ".attn.qkv.weight"] = {ShardKind::kRows, 3};
    shards[name + ".attn.qkv.bias"] = {ShardKind::kRows, 3};
    shards[name + ".attn.proj.weight"] = {ShardKind::kColumns, 1};
    shards[name + ".fc.weight"] = {ShardKind::kRows, 1};
    shards[name + ".fc.bias"] = {ShardKind::kRows, 1};
    shards[name + ".out.weight"] = {ShardKind::kColumns, 1};
    ++blocks;
    return make_parallel_transformer_block(name, dim, heads, block, group_);
  }

  GroupComm& group_;
  LinearSplit linears_;
  // The pending pair's row-parallel half: its list (the model's, or a group's body or shortcut)
  // and its place there. Nothing but elementwise activations lies between the halves, so the pair
  // is always completed before another list is entered.
  const LayerList* partner_list_ = nullptr;
  std::size_t row_partner_ = kNone;
};

std::string describe_split(const Splitter& s, int p) {
  std::vector<std::string> parts;
  if (s.all_gathered > 0) {
    parts.push_back(fmt::format(
        "{} Linear layers with 1/{} of their outputs per rank (seed 003's all-gather form)",
        s.all_gathered, p));
  }
  if (s.pairs > 0) {
    parts.push_back(fmt::format(
        "{} Megatron column-/row-parallel Linear pairs with 1/{} of their hidden units per rank",
        s.pairs, p));
  }
  if (s.blocks > 0) {
    parts.push_back(fmt::format("{} transformer blocks split by heads and MLP units", s.blocks));
  }
  if (s.attentions > 0) {
    parts.push_back(fmt::format("{} attentions split by heads", s.attentions));
  }
  if (s.replicated_linears > 0) {
    parts.push_back(fmt::format("{} unpaired Linear layers replicated", s.replicated_linears));
  }
  return fmt::format("layer list: {}; every other layer replicated", fmt::join(parts, ", "));
}

}  // namespace

TensorParallelModel build_layer_list_tensor_parallel(const LayerList& layers,
                                                     const LayerListInput& input, GroupComm& group,
                                                     LinearSplit linears,
                                                     const std::string& where) {
  Splitter splitter(group, linears);
  std::unique_ptr<Model> model = build_layer_list(layers, input, splitter, where);
  const int p = group.size();
  if (splitter.all_gathered + splitter.pairs + splitter.blocks + splitter.attentions == 0) {
    throw ConfigError(fmt::format(
        "tensor_parallel: no layer of {} splits over {} ranks with style {} (it splits "
        "{}, attention and transformer_block layers); every rank would compute the whole model: "
        "use data_parallel{}",
        where, p, linears == LinearSplit::kMegatron ? "megatron" : "allgather",
        linears == LinearSplit::kMegatron ? "linear -> activation -> linear pairs" : "linears",
        linears == LinearSplit::kMegatron ? ", or tensor_parallel.style = \"allgather\"" : ""));
  }
  TensorParallelModel result;
  std::size_t found = 0;
  for (const ParamEntry& entry : model->store().param_entries()) {
    const auto it = splitter.shards.find(entry.name);
    found += it != splitter.shards.end() ? 1 : 0;
    result.shards.push_back(it != splitter.shards.end() ? it->second
                                                        : ParamShard{ShardKind::kReplicated, 1});
  }
  DTRAIN_CHECK_EQ(found, splitter.shards.size());
  // Per sample: every collective's size is proportional to the batch.
  tensor::Shape shape{1};
  shape.insert(shape.end(), input.sample_shape.begin(), input.sample_shape.end());
  for (std::size_t i = 0; i < model->layers().size(); ++i) {
    Layer& layer = *model->layers()[i];
    const TensorParallelCost cost =
        tensor_parallel_layer_cost(layer, shape, i > model->first_trainable(), p);
    result.bytes_per_sample += cost.bytes;
    result.collectives_per_step += cost.collectives;
    shape = layer.output_shape(shape);
  }
  result.bytes_formula =
      "sum over the split layers: all-gathered Linear (P-1)/P x 4 B out + 2 (P-1)/P x 4 B in "
      "(not the first); column-parallel 2 (P-1)/P x 4 B in (not the first); row-parallel "
      "2 (P-1)/P x 4 B out; attention 2 and transformer block 4 x 2 (P-1)/P x 4 B T d";
  result.collectives_formula = "the split layers' allreduces and all-gathers";
  result.description = describe_split(splitter, p);
  result.parameters_formula =
      "the split tensors' 1/P (row-parallel biases whole) + the replicated layers' whole";
  result.model = std::move(model);
  return result;
}

}  // namespace dtrain::nn
