// Model: a sequence of layers over one ParamStore (a residual block counts as one layer).
//
// A sequence is what pipeline stages and tensor-parallel splits cut, so the model stays a list: a
// stage runs layers [begin, end) (LayerRange, forward_range / backward_range; the cuts are
// model_partition.h's).
//
// Micro-batch slots: a layer keeps what its backward needs (its input view, its output, masks,
// statistics) from the last forward. To keep several micro-batches in flight (a pipeline stage
// between its forward and backward of each), reserve_slots(n) gives the model n slots: slot 0 is
// the layers themselves, slot k > 0 a replica of every layer (Layer::clone) bound to the same
// store, so all slots read the same parameters and add into the same gradients while each keeps
// its own saved activations and workspaces (memory: one micro-batch's activations per slot). A
// forward with ForwardContext::slot = k and a backward with slot k form one micro-batch; slots are
// independent, so the backwards of slots may run in any order. Nothing is allocated per step once
// the slots exist, and slot 0 runs exactly the code it ran before slots existed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/layer.h"
#include "dtrain/nn/param_store.h"

namespace dtrain::nn {

// Layers [begin, end) of a model, in order: one pipeline stage.
struct LayerRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
  bool operator==(const LayerRange&) const = default;
};

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

  using LayerHook = std::function<void(std::size_t layer)>;

  // x: (B, sample_shape...) -> output (B, outputs), in slot ctx.slot. before_layer(i), when given,
  // runs just before layer i's forward (the forward twin of backward's after_layer: per-layer
  // timing, a stage boundary, prefetching a layer's parameters).
  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx,
                                const LayerHook& before_layer = {});
  // dy: gradient of the loss w.r.t. the last slot-0 forward's output; adds into store().grads().
  // after_layer(i), when given, runs as soon as layer i's backward is done (layers go from last to
  // first; layers below the first trainable one are skipped): from then on the gradients of layer
  // i's parameters are final, which lets data parallelism start their allreduce while backward
  // goes on.
  void backward(const tensor::Tensor& dy, const LayerHook& after_layer = {});

  // One stage's part: layers [range.begin, range.end) in slot ctx.slot; x is the input of layer
  // range.begin (the model input for begin = 0), the result the output of layer end - 1.
  const tensor::Tensor& forward_range(const tensor::Tensor& x, const ForwardContext& ctx,
                                      LayerRange range, const LayerHook& before_layer = {});
  // Backward of layers [range.begin, range.end) for the micro-batch forwarded in `slot`; dy is the
  // gradient w.r.t. layer end - 1's output. With input_grad, every layer of the range runs and the
  // result is dL/d(input of layer begin) (the gradient a pipeline stage sends back); without it,
  // layers below the first trainable one are skipped and the result is empty. Whole model, slot 0,
  // no input_grad: exactly backward().
  const tensor::Tensor& backward_range(const tensor::Tensor& dy, LayerRange range, std::size_t slot,
                                       bool input_grad, const LayerHook& after_layer = {});

  // Makes slots 0 .. slots - 1 usable (see the header); never shrinks. Call after build() and after
  // any change to the layers' settings (set_reducer, set_tile), which the replicas copy.
  void reserve_slots(std::size_t slots);
  std::size_t slots() const { return replicas_.size() + 1; }
  // The index of the first layer with parameters (layers below it need no input gradient).
  std::size_t first_trainable() const { return first_trainable_; }

  ParamStore& store() { return store_; }
  const ParamStore& store() const { return store_; }
  const tensor::Shape& sample_shape() const { return sample_shape_; }
  tensor::Shape output_shape(std::int64_t batch) const;
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // The layers of slot `slot` (< slots()): layers() for slot 0, else that slot's replicas.
  const std::vector<std::unique_ptr<Layer>>& slot_layers(std::size_t slot) const {
    return slot == 0 ? layers_ : replicas_[slot - 1];
  }
  // param_layer()[k]: the index of the layer that declared store().param_entries()[k].
  const std::vector<std::size_t>& param_layer() const { return param_layer_; }
  // One line per layer: name, description, output shape, parameter count.
  std::string summary() const;

 private:
  tensor::Shape sample_shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  ParamStore store_;
  std::vector<std::size_t> param_layer_;
  // Slot k > 0's replicas of layers_ (replicas_[k - 1][i] replicates layers_[i]).
  std::vector<std::vector<std::unique_ptr<Layer>>> replicas_;
  tensor::Tensor none_;
  std::size_t first_trainable_ = 0;  // index of the first layer with parameters
  bool built_ = false;
};

}  // namespace dtrain::nn
