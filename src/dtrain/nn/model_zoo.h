// Models by name: "mlp", "lenet5", "resnet". Each builder lives in its own file (model_mlp.cc,
// model_lenet5.cc, model_resnet.cc); build_model dispatches on the name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/model.h"

namespace dtrain::nn {

struct ModelSpec {
  std::string name = "mlp";                // "mlp" | "lenet5" | "resnet"
  tensor::Shape input{1, 28, 28};          // one sample (C, H, W); an mlp flattens it
  std::int64_t num_classes = 10;
  // mlp: widths of the hidden layers and their activation ("relu", "sigmoid", "tanh", "softplus",
  // "leaky_relu", "elu", "gelu"); dropout after each hidden activation when > 0.
  std::vector<std::int64_t> hidden{256, 256};
  std::string activation = "relu";
  float activation_alpha = 0.01f;          // leaky ReLU slope / ELU alpha
  float dropout = 0.0f;
  // resnet: channels of the first stage (doubled at each later stage) and blocks per stage.
  std::int64_t resnet_width = 16;
  std::int64_t resnet_blocks = 1;
  // Weight initialisation: "he", "xavier", "normal" (N(0, init_sigma^2)) or "uniform" (PyTorch's
  // default); see nn/init.h.
  std::string init = "he";
  float init_sigma = 0.01f;
};

// Returns a built model (shapes checked, ParamStore finalized), not yet initialised: call
// model->init(seed). Throws ConfigError for an unknown name or hyper-parameter, naming the accepted
// values, and ShapeError when the input is too small for the architecture.
std::unique_ptr<Model> build_model(const ModelSpec& spec);

std::unique_ptr<Model> build_mlp(const ModelSpec& spec);
std::unique_ptr<Model> build_lenet5(const ModelSpec& spec);
std::unique_ptr<Model> build_resnet(const ModelSpec& spec);

}  // namespace dtrain::nn
