#include "dtrain/nn/layer.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"

namespace dtrain::nn {

std::unique_ptr<Layer> Layer::clone() const {
  throw InternalError(fmt::format(
      "layer {} ({}) has no clone(): it cannot hold several micro-batches (Model::reserve_slots)",
      name_, describe()));
}

}  // namespace dtrain::nn
