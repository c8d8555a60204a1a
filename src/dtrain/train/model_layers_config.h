// The [[model.layer]] tables of a config (model.name = "layers", docs/MODELS.md): TOML to
// nn::LayerList and back.
//
//   [[model.layer]]            one layer: kind and its parameters (nn::layer_kinds())
//   kind = "conv2d"
//   out_channels = 6
//   [[model.layer]]
//   kind = "residual"          a group: its own lists, [[model.layer.body]] and
//   [[model.layer.body]]       [[model.layer.shortcut]], under the [[model.layer]] they follow
//   kind = "conv2d"
//
// They live outside config.cc's key table, whose keys hold one value each; config.cc calls these
// for the key "layer" of [model], and to_toml writes them back so that a run folder's resolved.toml
// reads back as the same Config.
#pragma once

#include <toml++/toml.h>

#include <string>

#include "dtrain/nn/layer_list.h"

namespace dtrain::train {

// `node`: the value of model.layer as parsed; `source` names the file in errors. Checks every
// kind, parameter name, type and range (nn::check_layer_list): a ConfigError names the layer
// (`model.layer[3] (linear) in FILE`), the parameter and what is accepted. Shapes are checked when
// the model is built, against the data.
nn::LayerList parse_model_layers(const toml::node& node, const std::string& source);

// The list as [[model.layer]] tables (empty text for an empty list), to follow [model]'s keys.
std::string model_layers_toml(const nn::LayerList& layers);

}  // namespace dtrain::train
