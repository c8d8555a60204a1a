// Layer: one step of a model with an explicit forward and backward (no autograd tape).
//
// Life cycle, driven by Model:
//   1. output_shape(input) checks that the layer fits its input and says what it produces; a misfit
//      throws ShapeError naming the layer and both shapes.
//   2. declare(store) names the layer's parameters and buffers (prefixed with name()).
//   3. after store.finalize(), bind(store) takes views of them; init(rng) fills them.
//   4. forward(x, ctx) returns the layer's own output buffer, valid until the next forward. The
//      layer may keep a view of x: the caller keeps x alive and unchanged until backward.
//   5. backward(dy, need_input_grad) ADDS the parameter gradients into the store's gradient buffer
//      (so gradient accumulation over micro-batches is free; the trainer zeroes it per step) and
//      returns dL/dx in a buffer of the layer's own, or an empty tensor when !need_input_grad (the
//      first layer skips that product).
//   6. clone() makes a replica for another micro-batch slot (Model::reserve_slots): the same
//      hyper-parameters and no saved state; Model declares it into a scratch store (so that it
//      gets the same tensor indices) and binds it to the model's store, so every replica reads and
//      writes the same parameters and gradients while each keeps its own saved activations.
// Shapes always carry the batch as dimension 0: (B, F) for features, (B, C, H, W) for images.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/nn/param_store.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::nn {

enum class Mode { kTrain, kEval };

// What forward needs besides its input: the mode (batch norm, dropout) and, for layers that draw
// random numbers, a seed and the global step so that every step and every layer has its own
// counter-based stream (see base/rng.h). `slot` is read by Model only: the micro-batch slot whose
// layer replicas run this forward and keep its activations until Model::backward with the same
// slot (a pipeline stage keeps several micro-batches in flight); 0 for everything else.
struct ForwardContext {
  Mode mode = Mode::kTrain;
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  std::size_t slot = 0;
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // What the layer is, with its hyper-parameters: "Linear(784 -> 256)".
  virtual std::string describe() const = 0;

  virtual tensor::Shape output_shape(const tensor::Shape& input) const = 0;
  virtual void declare(ParamStore& /*store*/) {}
  virtual void bind(ParamStore& /*store*/) {}
  virtual void init(Rng& /*rng*/) {}

  virtual const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) = 0;
  virtual const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) = 0;

  // The layers a composite layer (a residual block) is made of, for passes that must reach every
  // layer, such as switching batch norms to synchronized ones; empty for a plain layer.
  virtual std::vector<Layer*> sublayers() { return {}; }

  // A replica of this layer for another micro-batch slot: same hyper-parameters, no saved state,
  // not yet declared or bound (see the life cycle above). The default throws InternalError naming
  // the layer: a layer kind that cannot be replicated cannot hold two micro-batches at once.
  virtual std::unique_ptr<Layer> clone() const;

  // Names of store parameters this layer uses but does not declare (a tied output head reads the
  // embedding's weight): a model cut into stages must keep such a parameter in step between the
  // stage that owns it and the stage that borrows it.
  virtual std::vector<std::string> borrowed_params() const { return {}; }

 private:
  std::string name_;
};

}  // namespace dtrain::nn
