// A model described as data: a list of layers, each a kind and its parameters, with residual
// groups holding lists of their own. `[model] name = "layers"` with `[[model.layer]]` tables
// (docs/MODELS.md) is this list; the C++ library can build one too.
//
//   LayerSpec{kind = "conv2d", params = {out_channels: 6, kernel: 5, padding: 2}}
//   LayerSpec{kind = "residual", body = [...], shortcut = [...], params = {activation: "relu"}}
//
// Shapes are not written down: build_layer_list walks the list from the data's sample shape,
// (B, sample...), and each layer takes its input sizes from the shape before it (a linear's
// in_features, a conv2d's in_channels, a batch_norm's features, a transformer block's width and
// context). A layer that does not fit its input is a ShapeError naming it by place and kind,
// `model.layer[3] (linear)`, with the shape it got and the shape it needs; so is a model whose
// output is not (B, classes) ((B, T, classes) after an embedding: a language model).
//
// The kinds and their parameters are one table (layer_kinds()), which check_layer_list, the
// builder, the config parser (train/model_layers_config.h) and docs/MODELS.md follow.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "dtrain/nn/model.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::nn {

// A parameter's value as written: TOML's integer, float, boolean or string.
using LayerParam = std::variant<std::int64_t, double, bool, std::string>;

struct LayerSpec {
  std::string kind;
  std::map<std::string, LayerParam> params;  // every parameter but kind, body and shortcut
  std::vector<LayerSpec> body;               // residual: the main branch
  std::vector<LayerSpec> shortcut;           // residual: the projection (empty: identity)
  bool operator==(const LayerSpec&) const = default;
};

using LayerList = std::vector<LayerSpec>;

enum class LayerParamType {
  kInteger,
  kNumber,  // an integer is accepted too
  kBoolean,
  kString,            // one of `choices` when it has any
  kIntegerOrClasses,  // an integer, or the string "classes": the data set's class count
};

struct LayerParamInfo {
  std::string name;
  LayerParamType type = LayerParamType::kInteger;
  bool required = false;
  std::string fallback;  // what an unset optional parameter means, for messages and docs
  std::string help;
  // Numbers: the accepted range from min to max, each end open or closed.
  double min = 0;
  double max = 0;
  bool min_open = false;
  bool max_open = false;
  std::vector<std::string> choices = {};
};

struct LayerKindInfo {
  std::string kind;
  std::string shapes;  // "(B, ..., in) -> (B, ..., out)": the shape rule
  std::string help;
  std::vector<LayerParamInfo> params;  // "name" first, accepted by every kind
  bool group = false;                  // holds body and shortcut lists (residual)
};

// "model.layer[4].body[1]" -> "model.layer.body.body": the TOML table header of a place in a
// nested list (what its [[...]] tables are written under).
std::string layer_table_header(const std::string& where);

// Every kind, in the order docs/MODELS.md lists them.
const std::vector<LayerKindInfo>& layer_kinds();
// "linear, conv2d, ...": what an unknown kind's error lists.
std::string accepted_layer_kinds();

// Checks kinds, parameter names, types and ranges, and names, without shapes: ConfigError naming
// the layer (`<where>[3] (linear)`, with " in <source>" when source is not empty), the parameter
// and what is accepted. `where` is how the list is called ("model.layer").
void check_layer_list(const LayerList& layers, const std::string& where = "model.layer",
                      const std::string& source = "");

// What the list is built for: the data's sample shape and class count, and the model's init
// defaults (model.init, model.init_sigma) for the layers that do not set their own.
struct LayerListInput {
  tensor::Shape sample_shape;
  std::int64_t classes = 10;
  std::string init = "he";
  float init_sigma = 0.01f;
};

// Checks the list (check_layer_list), infers every layer's sizes from the shapes and returns the
// built model (not yet initialised: call init(seed)). Layers are named by their `name` parameter,
// by default "layer<i>" (i its place in the list); a group's layers are "<group>.<name>", by
// default
// "<group>.body<j>" and "<group>.shortcut<j>", so the tensors are "layer3.weight" and so on.
std::unique_ptr<Model> build_layer_list(const LayerList& layers, const LayerListInput& input,
                                        const std::string& where = "model.layer");

// The seam a split build hooks into (layer_list_tensor_parallel.h: the list over a tensor-parallel
// group). The builder makes every layer for one worker (all sizes and checks as above, the shapes
// walked unsplit), then offers it to the substitute, which returns its twin to build in its place
// (a split Linear, a split transformer block) or null to keep it. A twin declares the same tensor
// names in the same order (its own, possibly split, shapes) and takes and gives the same whole
// activations at the boundaries the list's shapes describe, except inside the pairs the
// substitute makes itself (a column-parallel Linear's split output feeds the row-parallel one).
struct LayerSite {
  const LayerList& list;  // the list the layer is in (a group's body or shortcut, or the model's)
  std::size_t index = 0;  // its place in that list
  bool top = false;       // the model's own list, not a residual group's
  std::string label;      // "model.layer[3] (linear)": how messages name it
  std::string name;       // its name, the prefix of its tensors
  tensor::Shape input;    // its unsplit input shape, (1, ...) for one sample
};
class LayerSubstitute {
 public:
  virtual ~LayerSubstitute() = default;
  virtual std::unique_ptr<Layer> substitute(const LayerSite& site, const Layer& unsplit) = 0;
};
std::unique_ptr<Model> build_layer_list(const LayerList& layers, const LayerListInput& input,
                                        LayerSubstitute& substitute,
                                        const std::string& where = "model.layer");

// The elements build_layer_list's model would hold, without allocating them (the layers are built
// and declare their tensors; nothing is laid out): what the memory budget (train/memory_budget.h)
// checks before a model of a layer list is built. Throws as build_layer_list does.
struct LayerListSize {
  std::int64_t parameters = 0;  // trained elements (ParamStore::num_params)
  std::int64_t buffers = 0;     // untrained elements (batch-norm running statistics)
};
LayerListSize layer_list_size(const LayerList& layers, const LayerListInput& input,
                              const std::string& where = "model.layer");

}  // namespace dtrain::nn
