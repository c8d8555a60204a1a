// Model: a sequence of layers over one ParamStore (a residual block counts as one layer).
//
// A sequence is what pipeline stages and tensor-parallel splits cut, so the model stays a list.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/layer.h"
#include "dtrain/nn/param_store.h"

namespace dtrain::nn {

class Model {
 public:
  // sample_shape: one input without the batch dimension, e.g. {1, 28, 28} or {784}.
  explicit Model(tensor::Shape sample_shape) : sample_shape_(std::move(sample_shape)) {}

  void add(std::unique_ptr<Layer> layer);
  // Checks that consecutive shapes fit (ShapeError naming the layer and both shapes), declares
  // every tensor, finalizes the store and binds the layers. Call once, after the last add().
  void build();
  // Fills parameters and buffers from a counter-based stream of `seed`: the same seed gives the
  // same model on every machine and rank.
  void init(std::uint64_t seed);

  // x: (B, sample_shape...) -> output (B, outputs).
  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx);
  // dy: gradient of the loss w.r.t. the last forward's output; adds into store().grads().
  // after_layer(i), when given, runs as soon as layer i's backward is done (layers go from last to
  // first; layers below the first trainable one are skipped): from then on the gradients of layer
  // i's parameters are final, which lets data parallelism start their allreduce while backward
  // goes on.
  void backward(const tensor::Tensor& dy,
                const std::function<void(std::size_t layer)>& after_layer = {});

  ParamStore& store() { return store_; }
  const ParamStore& store() const { return store_; }
  const tensor::Shape& sample_shape() const { return sample_shape_; }
  tensor::Shape output_shape(std::int64_t batch) const;
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // param_layer()[k]: the index of the layer that declared store().param_entries()[k].
  const std::vector<std::size_t>& param_layer() const { return param_layer_; }
  // One line per layer: name, description, output shape, parameter count.
  std::string summary() const;

 private:
  tensor::Shape sample_shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  ParamStore store_;
  std::vector<std::size_t> param_layer_;
  std::size_t first_trainable_ = 0;  // index of the first layer with parameters
  bool built_ = false;
};

}  // namespace dtrain::nn
