#include "dtrain/nn/model_zoo.h"

#include "dtrain/base/error.h"

namespace dtrain::nn {

std::unique_ptr<Model> build_model(const ModelSpec& spec) {
  if (spec.name == "mlp") return build_mlp(spec);
  if (spec.name == "lenet5") return build_lenet5(spec);
  if (spec.name == "resnet") return build_resnet(spec);
  if (spec.name == "gpt") return build_gpt(spec);
  throw ConfigError(
      fmt::format("model.name: unknown model '{}'; accepted: mlp, lenet5, resnet, gpt", spec.name));
}

}  // namespace dtrain::nn
