#include "dtrain/nn/layer_list.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/avg_pool2d.h"
#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/causal_self_attention.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/dropout.h"
#include "dtrain/nn/embedding.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/layer_norm.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/max_pool2d.h"
#include "dtrain/nn/residual_block.h"
#include "dtrain/nn/residual_group.h"
#include "dtrain/nn/tied_output_head.h"
#include "dtrain/nn/transformer_block.h"

namespace dtrain::nn {
namespace {

using T = LayerParamType;
constexpr double kSizeMax = 1e9;            // a width of 10^9 is a typo, not a model
constexpr float kTransformerSigma = 0.02f;  // GPT-2's N(0, 0.02^2) weights (model_gpt.cc)

LayerParamInfo name_param() {
  return {"name", T::kString, false, "layer<i>",
          "the layer's name, the prefix of its tensors in checkpoints (unique)"};
}
LayerParamInfo size_param(const char* name, const char* help, bool required = true,
                          const char* fallback = "", T type = T::kInteger) {
  return {name, type, required, fallback, help, 1, kSizeMax};
}
LayerParamInfo init_param() {
  return {"init", T::kString, false, "model.init", "weight initialisation (nn/init.h)",
          0,      0,          false, false,        {"he", "xavier", "normal", "uniform"}};
}
LayerParamInfo init_sigma_param(const char* fallback) {
  return {"init_sigma", T::kNumber, false, fallback, "standard deviation of normal weights", 0,
          kSizeMax,     true};
}
LayerParamInfo alpha_param(const char* fallback) {
  return {"alpha", T::kNumber, false, fallback, "leaky_relu slope / elu saturation", 0, kSizeMax};
}

std::vector<LayerKindInfo> make_kinds() {
  std::vector<LayerKindInfo> kinds = {
      {"linear",
       "[B, in] or [B, T, in] -> [B, out_features] or [B, T, out_features]",
       "fully connected, y = x W^T + b",
       {name_param(),
        size_param("out_features", "outputs; \"classes\": the data set's class count", true, "",
                   T::kIntegerOrClasses),
        init_param(), init_sigma_param("model.init_sigma")}},
      {"conv2d",
       "[B, C, H, W] -> [B, out_channels, (H + 2 padding - kernel) / stride + 1, ...]",
       "2-D convolution, square kernel",
       {name_param(),
        size_param("out_channels", "output channels"),
        size_param("kernel", "kernel side"),
        size_param("stride", "stride", false, "1"),
        {"padding", T::kInteger, false, "0", "zero padding on each side", 0, kSizeMax},
        {"bias", T::kBoolean, false, "true", "add a bias per output channel"},
        init_param(),
        init_sigma_param("model.init_sigma")}},
      {"batch_norm",
       "[B, F] or [B, F, H, W] -> the same",
       "batch normalization over F channels",
       {name_param(),
        {"momentum", T::kNumber, false, "0.1", "running statistics' update weight", 0, 1},
        {"eps", T::kNumber, false, "1e-5", "added to the variance", 0, 1, true}}},
      {"max_pool2d",
       "[B, C, H, W] -> [B, C, (H - kernel) / stride + 1, ...]",
       "largest value of each window",
       {name_param(), size_param("kernel", "window side"),
        size_param("stride", "stride", false, "kernel")}},
      {"avg_pool2d",
       "[B, C, H, W] -> [B, C, (H - kernel) / stride + 1, ...]",
       "mean of each window",
       {name_param(), size_param("kernel", "window side"),
        size_param("stride", "stride", false, "kernel")}},
      {"global_avg_pool2d",
       "[B, C, H, W] -> [B, C, 1, 1]",
       "mean of each whole map",
       {name_param()}},
      {"flatten", "[B, d1, d2, ...] -> [B, d1 d2 ...]", "images to features", {name_param()}},
      {"relu", "any -> the same", "max(x, 0)", {name_param()}},
      {"sigmoid", "any -> the same", "1 / (1 + e^-x)", {name_param()}},
      {"tanh", "any -> the same", "tanh x", {name_param()}},
      {"softplus", "any -> the same", "log(1 + e^x)", {name_param()}},
      {"gelu", "any -> the same", "x Phi(x), the erf form", {name_param()}},
      {"leaky_relu",
       "any -> the same",
       "x if x > 0 else alpha x",
       {name_param(), alpha_param("0.01")}},
      {"elu",
       "any -> the same",
       "x if x > 0 else alpha (e^x - 1)",
       {name_param(), alpha_param("1.0")}},
      {"dropout",
       "any -> the same",
       "inverted dropout, identity in evaluation",
       {name_param(), {"p", T::kNumber, true, "", "drop probability", 0, 1, false, true}}},
      {"layer_norm",
       "[B, ..., d] -> the same",
       "layer normalization over the last dimension",
       {name_param(), {"eps", T::kNumber, false, "1e-5", "added to the variance", 0, 1, true}}},
      {"embedding",
       "[B, T] token ids -> [B, T, dim]",
       "token + learned position embeddings; the first layer, T = the data's window",
       {name_param(), size_param("dim", "width d"),
        size_param("vocab", "tokens; \"classes\": the data set's (256 for bytes)", false, "classes",
                   T::kIntegerOrClasses),
        init_sigma_param("0.02")}},
      {"attention",
       "[B, T, d] -> [B, T, d]",
       "causal multi-head self-attention (qkv and proj Linears)",
       {name_param(), size_param("heads", "attention heads, a divisor of d"),
        init_sigma_param("0.02")}},
      {"transformer_block",
       "[B, T, d] -> [B, T, d]",
       "pre-norm GPT block: x + attention(ln(x)), then + mlp(ln(.)) with a 4d GELU MLP",
       {name_param(), size_param("heads", "attention heads, a divisor of d"),
        init_sigma_param("0.02")}},
      {"tied_head",
       "[B, T, d] -> [B, T, vocab]",
       "logits = x E^T with E the embedding's token weight (tied, no bias)",
       {name_param(),
        {"tied_to", T::kString, false, "the embedding",
         "the name of the embedding layer whose weight it shares"}}},
      {"residual_block",
       "[B, C, H, W] -> [B, out_channels, (H - 1) / stride + 1, ...]",
       "ResNet basic block: conv3x3, bn, relu, conv3x3, bn, + shortcut (1x1 conv and bn when the "
       "shape changes), relu",
       {name_param(), size_param("out_channels", "output channels"),
        size_param("stride", "stride of the first conv and the projection", false, "1"),
        init_param(), init_sigma_param("model.init_sigma")}},
      {"residual",
       "x -> activation(body(x) + shortcut(x)); body and shortcut must give the same shape",
       "a residual group: its own lists `body` (required) and `shortcut` (empty: the identity)",
       {name_param(),
        {"activation",
         T::kString,
         false,
         "none",
         "applied to the sum",
         0,
         0,
         false,
         false,
         {"none", "relu", "sigmoid", "tanh", "softplus", "leaky_relu", "elu", "gelu"}},
        alpha_param("0.01")},
       true},
  };
  return kinds;
}

const LayerKindInfo* find_kind(const std::string& kind) {
  for (const auto& info : layer_kinds()) {
    if (info.kind == kind) return &info;
  }
  return nullptr;
}

std::string accepted_params(const LayerKindInfo& info) {
  std::vector<std::string> names;
  for (const auto& p : info.params) names.push_back(p.name);
  if (info.group) {
    names.emplace_back("body");
    names.emplace_back("shortcut");
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string quoted(const std::string& s) { return fmt::format("\"{}\"", s); }

std::string param_text(const LayerParam& value) {
  struct Visitor {
    std::string operator()(std::int64_t v) const { return fmt::format("{}", v); }
    std::string operator()(double v) const { return fmt::format("{}", v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return quoted(v); }
  };
  return std::visit(Visitor{}, value);
}

const char* param_type_text(const LayerParam& value) {
  switch (value.index()) {
    case 0: return "an integer";
    case 1: return "a float";
    case 2: return "a boolean";
    default: return "a string";
  }
}

const char* wanted_type_text(T type) {
  switch (type) {
    case T::kInteger: return "an integer";
    case T::kNumber: return "a number";
    case T::kBoolean: return "true or false";
    case T::kString: return "a string";
    default: return "an integer or \"classes\"";
  }
}

void check_param(const LayerParamInfo& info, const LayerParam& value, const std::string& label) {
  const bool is_int = std::holds_alternative<std::int64_t>(value);
  const bool is_classes =
      std::holds_alternative<std::string>(value) && std::get<std::string>(value) == "classes";
  bool type_ok = false;
  switch (info.type) {
    case T::kInteger: type_ok = is_int; break;
    case T::kNumber: type_ok = is_int || std::holds_alternative<double>(value); break;
    case T::kBoolean: type_ok = std::holds_alternative<bool>(value); break;
    case T::kString: type_ok = std::holds_alternative<std::string>(value); break;
    case T::kIntegerOrClasses: type_ok = is_int || is_classes; break;
  }
  if (!type_ok) {
    throw ConfigError(fmt::format("{}: parameter '{}' must be {}, got {} {}", label, info.name,
                                  wanted_type_text(info.type), param_type_text(value),
                                  param_text(value)));
  }
  if (info.type == T::kString && !info.choices.empty()) {
    const auto& s = std::get<std::string>(value);
    bool found = false;
    for (const auto& choice : info.choices) found = found || choice == s;
    if (!found) {
      std::vector<std::string> q;
      for (const auto& choice : info.choices) q.push_back(quoted(choice));
      throw ConfigError(fmt::format("{}: parameter '{}' = {} is not accepted; accepted: {}", label,
                                    info.name, quoted(s), fmt::join(q, ", ")));
    }
  }
  if (info.type == T::kString && info.choices.empty() && std::get<std::string>(value).empty()) {
    throw ConfigError(fmt::format("{}: parameter '{}' is empty", label, info.name));
  }

  if ((info.type == T::kInteger || info.type == T::kNumber || info.type == T::kIntegerOrClasses) &&
      !is_classes) {
    const double x =
        is_int ? static_cast<double>(std::get<std::int64_t>(value)) : std::get<double>(value);
    const bool above = info.min_open ? x > info.min : x >= info.min;
    const bool below = info.max_open ? x < info.max : x <= info.max;
    if (!std::isfinite(x) || !above || !below) {
      throw ConfigError(
          fmt::format("{}: parameter '{}' = {} is out of range; accepted: {} {} {} {} {}", label,
                      info.name, param_text(value), info.min, info.min_open ? "<" : "<=", info.name,
                      info.max_open ? "<" : "<=", info.max));
    }
  }
}

void check_list(const LayerList& layers, const std::string& where, const std::string& in) {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& spec = layers[i];
    const std::string place = fmt::format("{}[{}]", where, i);
    if (spec.kind.empty()) {
      throw ConfigError(
          fmt::format("{}{}: no kind; set kind = one of {}", place, in, accepted_layer_kinds()));
    }
    const LayerKindInfo* info = find_kind(spec.kind);
    if (info == nullptr) {
      throw ConfigError(fmt::format("{}{}: unknown kind '{}'; accepted kinds: {}", place, in,
                                    spec.kind, accepted_layer_kinds()));
    }
    const std::string label = fmt::format("{} ({}){}", place, spec.kind, in);
    for (const auto& [key, value] : spec.params) {
      const LayerParamInfo* param = nullptr;
      for (const auto& p : info->params) {
        if (p.name == key) param = &p;
      }
      if (param == nullptr) {
        throw ConfigError(fmt::format("{}: unknown parameter '{}'; accepted parameters of {}: {}",
                                      label, key, spec.kind, accepted_params(*info)));
      }
      check_param(*param, value, label);
    }
    for (const auto& p : info->params) {
      if (p.required && spec.params.count(p.name) == 0) {
        throw ConfigError(
            fmt::format("{}: missing parameter '{}' ({}); accepted parameters of {}: {}", label,
                        p.name, p.help, spec.kind, accepted_params(*info)));
      }
    }
    if (!info->group && (!spec.body.empty() || !spec.shortcut.empty())) {
      throw ConfigError(fmt::format("{}: unknown parameter '{}'; accepted parameters of {}: {}",
                                    label, spec.body.empty() ? "shortcut" : "body", spec.kind,
                                    accepted_params(*info)));
    }
    if (info->group) {
      if (spec.body.empty()) {
        throw ConfigError(fmt::format(
            "{}: missing parameter 'body', the group's layers; add [[{}.body]] tables after it",
            label, layer_table_header(place)));
      }
      check_list(spec.body, place + ".body", in);
      check_list(spec.shortcut, place + ".shortcut", in);
    }
  }
}

std::int64_t get_int(const LayerSpec& spec, const char* key, std::int64_t fallback) {
  const auto it = spec.params.find(key);
  return it == spec.params.end() ? fallback : std::get<std::int64_t>(it->second);
}

// An integer, or "classes" for `classes`.
std::int64_t get_size(const LayerSpec& spec, const char* key, std::int64_t classes) {
  const auto it = spec.params.find(key);
  if (it == spec.params.end() || std::holds_alternative<std::string>(it->second)) return classes;
  return std::get<std::int64_t>(it->second);
}

double get_number(const LayerSpec& spec, const char* key, double fallback) {
  const auto it = spec.params.find(key);
  if (it == spec.params.end()) return fallback;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*i);
  return std::get<double>(it->second);
}

bool get_bool(const LayerSpec& spec, const char* key, bool fallback) {
  const auto it = spec.params.find(key);
  return it == spec.params.end() ? fallback : std::get<bool>(it->second);
}

std::string get_string(const LayerSpec& spec, const char* key, const std::string& fallback) {
  const auto it = spec.params.find(key);
  return it == spec.params.end() ? fallback : std::get<std::string>(it->second);
}

// Builds the layers of a list one by one, each from the shape the one before gives.
class ListBuilder {
 public:
  ListBuilder(const LayerListInput& input, LayerSubstitute* substitute)
      : input_(input), substitute_(substitute) {}

  // `shape` (B, ...) is the list's input on entry and its output on return. prefix: "" at the top,
  // "<group>." inside a group; stem: the default name's stem ("layer", "body", "shortcut").
  std::vector<std::unique_ptr<Layer>> build_list(const LayerList& layers, const std::string& where,
                                                 const std::string& prefix, const char* stem,
                                                 tensor::Shape& shape, bool top) {
    std::vector<std::unique_ptr<Layer>> out;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const LayerSpec& spec = layers[i];
      const std::string place = fmt::format("{}[{}]", where, i);
      const std::string label = fmt::format("{} ({})", place, spec.kind);
      const std::string name = prefix + get_string(spec, "name", fmt::format("{}{}", stem, i));
      const auto [it, fresh] = names_.emplace(name, place);
      if (!fresh) {
        throw ConfigError(fmt::format("{}: name '{}' is already taken by {}; names must be unique",
                                      label, name, it->second));
      }
      const bool first = top && i == 0;
      const tensor::Shape input = shape;
      std::unique_ptr<Layer> layer = build_one(spec, place, label, name, shape, first);
      if (substitute_ != nullptr) {
        std::unique_ptr<Layer> twin =
            substitute_->substitute(LayerSite{layers, i, top, label, name, input}, *layer);
        if (twin) layer = std::move(twin);
      }
      out.push_back(std::move(layer));
      last_label_ = label;
    }
    return out;
  }

  const std::string& last_label() const { return last_label_; }
  bool has_embedding() const { return !embeddings_.empty(); }

 private:
  struct EmbeddingInfo {
    std::string weight_name;
    std::int64_t vocab = 0;
    std::int64_t dim = 0;
  };

  [[noreturn]] static void misfit(const std::string& label, const tensor::Shape& shape,
                                  const std::string& wanted, const std::string& hint) {
    throw ShapeError(fmt::format("{} takes {}, got {}{}{}", label, wanted,
                                 tensor::batch_shape_str(shape), hint.empty() ? "" : "; ", hint));
  }

  static void need_rank(const std::string& label, const tensor::Shape& shape,
                        std::initializer_list<std::size_t> ranks, const std::string& wanted,
                        const std::string& hint) {
    for (std::size_t r : ranks) {
      if (shape.size() == r) return;
    }
    misfit(label, shape, wanted, hint);
  }

  InitKind init_kind(const LayerSpec& spec) const {
    return parse_init(get_string(spec, "init", input_.init));
  }
  float init_sigma(const LayerSpec& spec, float fallback) const {
    return static_cast<float>(get_number(spec, "init_sigma", fallback));
  }

  std::unique_ptr<Layer> make(const LayerSpec& spec, const std::string& place,
                              const std::string& label, const std::string& name,
                              const tensor::Shape& in, bool first) {
    const std::string& kind = spec.kind;
    const std::string image = "[B, C, H, W]";
    if (kind == "linear") {
      need_rank(label, in, {2, 3}, "[B, features] or [B, T, features]", "put a flatten before it");
      return std::make_unique<Linear>(name, in.back(),
                                      get_size(spec, "out_features", input_.classes),
                                      init_kind(spec), init_sigma(spec, input_.init_sigma));
    }
    if (kind == "conv2d") {
      need_rank(label, in, {4}, image, "a convolution reads images (data with a [C, H, W] sample)");
      return std::make_unique<Conv2d>(name, in[1], get_int(spec, "out_channels", 0),
                                      get_int(spec, "kernel", 0), get_int(spec, "stride", 1),
                                      get_int(spec, "padding", 0), get_bool(spec, "bias", true),
                                      init_kind(spec), init_sigma(spec, input_.init_sigma));
    }
    if (kind == "batch_norm") {
      need_rank(label, in, {2, 4}, "[B, F] or [B, F, H, W]", "");
      return std::make_unique<BatchNorm>(name, in[1],
                                         static_cast<float>(get_number(spec, "momentum", 0.1)),
                                         static_cast<float>(get_number(spec, "eps", 1e-5)));
    }
    if (kind == "max_pool2d" || kind == "avg_pool2d") {
      need_rank(label, in, {4}, image, "");
      const std::int64_t k = get_int(spec, "kernel", 0);
      const std::int64_t s = get_int(spec, "stride", k);
      if (kind == "max_pool2d") return std::make_unique<MaxPool2d>(name, k, s);
      return std::make_unique<AvgPool2d>(name, k, s);
    }
    if (kind == "global_avg_pool2d") {
      need_rank(label, in, {4}, image, "");
      return AvgPool2d::global(name);
    }
    if (kind == "flatten") {
      need_rank(label, in, {2, 3, 4, 5, 6}, "[B, d1, ...]", "");
      return std::make_unique<Flatten>(name);
    }
    if (kind == "dropout") {
      return std::make_unique<Dropout>(name, static_cast<float>(get_number(spec, "p", 0.0)));
    }
    if (kind == "layer_norm") {
      need_rank(label, in, {2, 3, 4, 5, 6}, "[B, ..., d]", "");
      return std::make_unique<LayerNorm>(name, in.back(),
                                         static_cast<float>(get_number(spec, "eps", 1e-5)));
    }
    if (kind == "embedding") {
      if (!first) {
        throw ConfigError(fmt::format("{} reads token ids, so it must be the first layer, {}[0]",
                                      label, place.substr(0, place.rfind('['))));
      }
      need_rank(label, in, {2}, "[B, T] token ids",
                "an embedding reads text windows (data.dataset = \"text\")");
      const std::int64_t vocab = get_size(spec, "vocab", input_.classes);
      const std::int64_t dim = get_int(spec, "dim", 0);
      auto layer =
          std::make_unique<Embedding>(name, vocab, in[1], dim, init_sigma(spec, kTransformerSigma));
      embeddings_[name] = EmbeddingInfo{layer->token_weight_name(), vocab, dim};
      return layer;
    }
    if (kind == "attention" || kind == "transformer_block") {
      need_rank(label, in, {3}, "[B, T, d]", "put an embedding before it");
      const std::int64_t heads = get_int(spec, "heads", 0);
      if (in[2] % heads != 0) {
        throw ShapeError(fmt::format(
            "{}: heads = {} does not divide the width d = {} of its input {}; each head takes d / "
            "heads columns",
            label, heads, in[2], tensor::batch_shape_str(in)));
      }
      const float sigma = init_sigma(spec, kTransformerSigma);
      if (kind == "attention") {
        return std::make_unique<CausalSelfAttention>(name, in[2], heads, in[1], sigma);
      }
      return std::make_unique<TransformerBlock>(name, in[2], heads, in[1], sigma);
    }
    if (kind == "tied_head") return make_tied_head(spec, label, name, in);
    if (kind == "residual_block") {
      need_rank(label, in, {4}, image, "");
      return std::make_unique<ResidualBlock>(name, in[1], get_int(spec, "out_channels", 0),
                                             get_int(spec, "stride", 1), init_kind(spec),
                                             init_sigma(spec, input_.init_sigma));
    }
    if (kind == "residual") return make_group(spec, place, label, name, in);
    return std::make_unique<Activation>(
        name, parse_activation(kind),
        static_cast<float>(get_number(spec, "alpha", kind == "elu" ? 1.0 : 0.01)));
  }

  std::unique_ptr<Layer> make_tied_head(const LayerSpec& spec, const std::string& label,
                                        const std::string& name, const tensor::Shape& in) {
    std::vector<std::string> names;
    for (const auto& [embedding, info] : embeddings_) names.push_back(embedding);
    std::string tied = get_string(spec, "tied_to", "");
    if (tied.empty()) {
      if (embeddings_.size() != 1) {
        throw ConfigError(fmt::format(
            "{} shares the weight of an embedding, but {}; set tied_to to the embedding's name",
            label,
            embeddings_.empty() ? std::string("no embedding comes before it")
                                : fmt::format("several do ({})", fmt::join(names, ", "))));
      }
      tied = embeddings_.begin()->first;
    }
    const auto it = embeddings_.find(tied);
    if (it == embeddings_.end()) {
      throw ConfigError(
          fmt::format("{}: tied_to = \"{}\" names no embedding before it; embeddings: {}", label,
                      tied, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
    }
    const EmbeddingInfo& info = it->second;
    if (in.size() < 2 || in.back() != info.dim) {
      tensor::Shape wanted = in;
      if (wanted.size() < 2) wanted.resize(2);
      wanted.back() = info.dim;
      misfit(label, in, tensor::batch_shape_str(wanted),
             fmt::format("the last size must be the width dim = {} of embedding '{}'", info.dim,
                         tied));
    }
    return std::make_unique<TiedOutputHead>(name, info.weight_name, info.dim, info.vocab);
  }

  std::unique_ptr<Layer> make_group(const LayerSpec& spec, const std::string& place,
                                    const std::string& label, const std::string& name,
                                    const tensor::Shape& in) {
    tensor::Shape body_shape = in;
    auto body = build_list(spec.body, place + ".body", name + ".", "body", body_shape, false);
    tensor::Shape shortcut_shape = in;
    auto shortcut = build_list(spec.shortcut, place + ".shortcut", name + ".", "shortcut",
                               shortcut_shape, false);
    if (body_shape != shortcut_shape) {
      throw ShapeError(fmt::format(
          "{}: the body gives {} but the {} gives {}; they are added, so they must match{}", label,
          tensor::batch_shape_str(body_shape),
          spec.shortcut.empty() ? "identity shortcut" : "shortcut",
          tensor::batch_shape_str(shortcut_shape),
          spec.shortcut.empty()
              ? fmt::format(" (add a projection: [[{}.shortcut]] tables, e.g. a 1x1 conv2d and a "
                            "batch_norm)",
                            layer_table_header(place))
              : ""));
    }
    std::unique_ptr<Activation> act;
    const std::string activation = get_string(spec, "activation", "none");
    if (activation != "none") {
      act = std::make_unique<Activation>(name + ".act", parse_activation(activation),
                                         static_cast<float>(get_number(spec, "alpha", 0.01)));
    }
    return std::make_unique<ResidualGroup>(name, std::move(body), std::move(shortcut),
                                           std::move(act));
  }

  std::unique_ptr<Layer> build_one(const LayerSpec& spec, const std::string& place,
                                   const std::string& label, const std::string& name,
                                   tensor::Shape& shape, bool first) {
    std::unique_ptr<Layer> layer = make(spec, place, label, name, shape, first);
    try {
      shape = layer->output_shape(shape);
    } catch (const ShapeError& e) {
      if (spec.kind == "residual") throw;  // its lists named the layer already
      throw ShapeError(fmt::format("{}: {}", label, e.what()));
    }
    return layer;
  }

  const LayerListInput& input_;
  LayerSubstitute* substitute_;               // null: every layer as made
  std::map<std::string, std::string> names_;  // layer name -> its place
  std::map<std::string, EmbeddingInfo> embeddings_;
  std::string last_label_;
};

}  // namespace

const std::vector<LayerKindInfo>& layer_kinds() {
  static const std::vector<LayerKindInfo> kinds = make_kinds();
  return kinds;
}

std::string accepted_layer_kinds() {
  std::vector<std::string> names;
  for (const auto& info : layer_kinds()) names.push_back(info.kind);
  return fmt::format("{}", fmt::join(names, ", "));
}

void check_layer_list(const LayerList& layers, const std::string& where,
                      const std::string& source) {
  check_list(layers, where, source.empty() ? "" : " in " + source);
}

namespace {

// The layers of the list with every size inferred from the shapes, not yet declared into a store
// (a layer holds no tensors until then).
std::vector<std::unique_ptr<Layer>> build_layers(const LayerList& layers,
                                                 const LayerListInput& input,
                                                 const std::string& where,
                                                 LayerSubstitute* substitute = nullptr) {
  if (layers.empty()) {
    throw ConfigError(fmt::format(
        "{}: the layer list is empty; describe the model as [[{}]] tables, each with a kind "
        "(docs/MODELS.md)",
        where, where));
  }
  check_layer_list(layers, where);
  parse_init(input.init);
  if (input.sample_shape.empty() || tensor::shape_numel(input.sample_shape) <= 0) {
    throw ShapeError(fmt::format("{}: the data's sample shape {} is empty", where,
                                 tensor::shape_str(input.sample_shape)));
  }
  tensor::Shape shape{1};
  shape.insert(shape.end(), input.sample_shape.begin(), input.sample_shape.end());
  ListBuilder builder(input, substitute);
  auto built = builder.build_list(layers, where, "", "layer", shape, true);
  // The loss reads (B, classes) logits, or (B, T, classes) for a language model (one prediction
  // per position, after an embedding).
  tensor::Shape wanted{1, input.classes};
  if (builder.has_embedding()) wanted = {1, input.sample_shape[0], input.classes};
  if (shape != wanted) {
    throw ShapeError(fmt::format(
        "{}, the last layer, gives {} but the loss needs {} (the data set has {} classes){}",
        builder.last_label(), tensor::batch_shape_str(shape), tensor::batch_shape_str(wanted),
        input.classes,
        shape.size() == wanted.size() ? "; end with a linear of out_features = \"classes\""
                                      : "; flatten before the last linear"));
  }
  return built;
}

}  // namespace

LayerListSize layer_list_size(const LayerList& layers, const LayerListInput& input,
                              const std::string& where) {
  ParamStore store;  // declarations only: finalize() would allocate
  for (auto& layer : build_layers(layers, input, where)) layer->declare(store);
  LayerListSize size;
  for (const ParamEntry& entry : store.param_entries()) size.parameters += entry.numel;
  for (const ParamEntry& entry : store.buffer_entries()) size.buffers += entry.numel;
  return size;
}

namespace {

std::unique_ptr<Model> assemble(std::vector<std::unique_ptr<Layer>> built,
                                const LayerListInput& input, const std::string& where) {
  auto model = std::make_unique<Model>(input.sample_shape);
  for (auto& layer : built) model->add(std::move(layer));
  try {
    model->build();
  } catch (const InternalError& e) {
    // Names are the user's here: a layer named "r.conv1" beside a group "r" holding a "conv1"
    // declares r.conv1.weight twice.
    if (std::string_view(e.what()).find("declared twice") == std::string_view::npos) throw;
    throw ConfigError(fmt::format(
        "{}: two layers declare the same tensor ({}); give them distinct names (a group's "
        "layers are named <group>.<layer>)",
        where, e.what()));
  }
  return model;
}

}  // namespace

std::unique_ptr<Model> build_layer_list(const LayerList& layers, const LayerListInput& input,
                                        const std::string& where) {
  return assemble(build_layers(layers, input, where), input, where);
}

std::unique_ptr<Model> build_layer_list(const LayerList& layers, const LayerListInput& input,
                                        LayerSubstitute& substitute, const std::string& where) {
  return assemble(build_layers(layers, input, where, &substitute), input, where);
}

std::string layer_table_header(const std::string& where) {
  std::string out;
  bool skip = false;
  for (char c : where) {
    if (c == '[') skip = true;
    if (!skip) out += c;
    if (c == ']') skip = false;
  }
  return out;
}

}  // namespace dtrain::nn
