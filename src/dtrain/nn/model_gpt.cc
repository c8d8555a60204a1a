// build_gpt: the layer list gpt_layers(spec), a GPT-style decoder-only transformer (GPT-2's
// pre-norm layout, no dropout), the same model as the PyTorch reference
// ../shared/peers/scripts/train_charlm.py. V = spec.vocab, d = spec.d_model, H = spec.heads, L =
// spec.layers, block = spec.block:
//
//   embed        Embedding: token (V, d) + position (block, d)    (B, T) ids -> (B, T, d)
//   block1..L    TransformerBlock(d, H, block)                    (B, T, d)  -> (B, T, d)
//   ln_f         LayerNorm(d)                                     (B, T, d)  -> (B, T, d)
//   head         TiedOutputHead: x embed.token_weight^T           (B, T, d)  -> (B, T, V) logits
//
// Parameters: V d + block d + L (12 d^2 + 13 d) + 2 d (842,496 at V = 256, block = 128, d = 128,
// L = 4), exactly torch's sum(p.numel() for p in model.parameters()).
// FLOPs per token, forward and backward: 72 L d^2 (Linears) + 6 d V (head) + 12 L T d (attention,
// full square) = 5.70 MFLOP at the reference's sizes (docs/TRANSFORMER.md).
// Init as the reference: Linear and Embedding weights N(0, 0.02^2), biases 0, LayerNorm 1 and 0.
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/nn/model_zoo.h"

namespace dtrain::nn {
namespace {

constexpr float kGptInitSigma = 0.02f;

void check_gpt_spec(const ModelSpec& spec) {
  if (spec.vocab <= 0 || spec.block <= 0 || spec.d_model <= 0 || spec.heads <= 0 ||
      spec.layers <= 0) {
    throw ConfigError(fmt::format(
        "model.vocab, model.block, model.d_model, model.heads, model.layers: must all be > 0, got "
        "{}, {}, {}, {}, {} (256, 128, 128, 4, 4 is the reference model)",
        spec.vocab, spec.block, spec.d_model, spec.heads, spec.layers));
  }
  if (spec.d_model % spec.heads != 0) {
    throw ConfigError(fmt::format(
        "model.heads: {} does not divide model.d_model = {}; each head takes d_model / heads "
        "columns",
        spec.heads, spec.d_model));
  }
}

}  // namespace

std::int64_t gpt_parameter_count(const ModelSpec& spec) {
  const std::int64_t d = spec.d_model;
  return spec.vocab * d + spec.block * d + spec.layers * (12 * d * d + 13 * d) + 2 * d;
}

LayerList gpt_layers(const ModelSpec& spec) {
  check_gpt_spec(spec);
  LayerList list;
  const auto add = [&](const char* kind, const std::string& name,
                       std::map<std::string, LayerParam> params = {}) {
    params["name"] = name;
    list.push_back(LayerSpec{kind, std::move(params), {}, {}});
  };
  // The vocabulary is the list's class count (build_gpt passes spec.vocab), the context the
  // sample's length (spec.block), the init GPT-2's N(0, 0.02^2) (kGptInitSigma, the kinds'
  // default).
  add("embedding", "embed", {{"dim", spec.d_model}});
  for (std::int64_t i = 1; i <= spec.layers; ++i) {
    add("transformer_block", fmt::format("block{}", i), {{"heads", spec.heads}});
  }
  add("layer_norm", "ln_f");
  add("tied_head", "head");
  return list;
}

std::unique_ptr<Model> build_gpt(const ModelSpec& spec) {
  LayerList list = gpt_layers(spec);
  return build_layer_list(list, LayerListInput{{spec.block}, spec.vocab, "normal", kGptInitSigma},
                          "gpt layer");
}

}  // namespace dtrain::nn
