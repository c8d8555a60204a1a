#include "dtrain/nn/model_zoo.h"

#include "dtrain/base/error.h"

namespace dtrain::nn {

std::unique_ptr<Model> build_model(const ModelSpec& spec) {
  if (spec.name == "mlp") return build_mlp(spec);
  if (spec.name == "lenet5") return build_lenet5(spec);
  if (spec.name == "resnet") return build_resnet(spec);
  if (spec.name == "gpt") return build_gpt(spec);
  if (spec.name == "layers") {
    return build_layer_list(
        spec.layer_list, LayerListInput{spec.input, spec.num_classes, spec.init, spec.init_sigma});
  }
  throw ConfigError(fmt::format(
      "model.name: unknown model '{}'; accepted: mlp, lenet5, resnet, gpt, layers", spec.name));
}

}  // namespace dtrain::nn
