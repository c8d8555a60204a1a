// Models by name: "mlp", "lenet5", "resnet", "gpt", and "layers" (a list of layers written in the
// config, layer_list.h). Each builder lives in its own file (model_mlp.cc, model_lenet5.cc,
// model_resnet.cc, model_gpt.cc) and builds its model as a layer list; build_model dispatches on
// the name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/layer_list.h"
#include "dtrain/nn/model.h"

namespace dtrain::nn {

struct ModelSpec {
  std::string name = "mlp";        // "mlp" | "lenet5" | "resnet" | "gpt" | "layers"
  tensor::Shape input{1, 28, 28};  // one sample (C, H, W); an mlp flattens it
  std::int64_t num_classes = 10;
  // mlp: widths of the hidden layers and their activation ("relu", "sigmoid", "tanh", "softplus",
  // "leaky_relu", "elu", "gelu"); dropout after each hidden activation when > 0.
  std::vector<std::int64_t> hidden{256, 256};
  std::string activation = "relu";
  float activation_alpha = 0.01f;  // leaky ReLU slope / ELU alpha
  float dropout = 0.0f;
  // resnet: channels of the first stage (doubled at each later stage) and blocks per stage.
  std::int64_t resnet_width = 16;
  std::int64_t resnet_blocks = 1;
  // Weight initialisation: "he", "xavier", "normal" (N(0, init_sigma^2)) or "uniform" (PyTorch's
  // default); see nn/init.h. (gpt has its own, GPT-2's: N(0, 0.02^2) weights, zero biases.)
  std::string init = "he";
  float init_sigma = 0.01f;
  // gpt (docs/TRANSFORMER.md): token vocabulary (256: bytes), context window in tokens, width,
  // attention heads (dividing d_model) and transformer blocks. Its input is (B, T) token ids as
  // floats with T <= block (the sample shape is [block]; `input` and `num_classes` are not read:
  // the logits are (B, T, vocab)).
  std::int64_t vocab = 256;
  std::int64_t block = 128;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
  std::int64_t layers = 4;
  // "layers": the model as a list of layers (layer_list.h, docs/MODELS.md), built from `input`
  // and `num_classes` with `init` and `init_sigma` as the defaults of the layers that take them.
  LayerList layer_list;
};

// Returns a built model (shapes checked, ParamStore finalized), not yet initialised: call
// model->init(seed). Throws ConfigError for an unknown name or hyper-parameter, naming the accepted
// values, and ShapeError when the input is too small for the architecture.
std::unique_ptr<Model> build_model(const ModelSpec& spec);

// Each builder checks the spec (ConfigError naming the key), describes its model as a layer list
// (layer_list.h) and builds that: the zoo and `model.name = "layers"` share one path, and
// examples/models/*.toml are these lists written out (tests/train/model_layers_test.cc).
LayerList mlp_layers(const ModelSpec& spec);
LayerList lenet5_layers(const ModelSpec& spec);
LayerList resnet_layers(const ModelSpec& spec);
LayerList gpt_layers(const ModelSpec& spec);

std::unique_ptr<Model> build_mlp(const ModelSpec& spec);
std::unique_ptr<Model> build_lenet5(const ModelSpec& spec);
std::unique_ptr<Model> build_resnet(const ModelSpec& spec);
std::unique_ptr<Model> build_gpt(const ModelSpec& spec);

// The parameter count of build_gpt(spec), in closed form (the tied head counted once, as PyTorch
// counts it): V d + block d + L (12 d^2 + 13 d) + 2 d. 842,496 for the defaults.
std::int64_t gpt_parameter_count(const ModelSpec& spec);

}  // namespace dtrain::nn
