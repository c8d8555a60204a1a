// ParamStore: every parameter of a model in one flat buffer, every gradient in a second flat buffer
// with the same layout, and the non-trained state (batch-norm running statistics) in a third.
//
// Layers declare their tensors by name and shape while the model is built; finalize() lays them out
// back to back in declaration order, allocates the buffers, and from then on param(i) / grad(i) /
// buffer(i) are views into them. Parameters start at the beginning of a page and gradients half a
// page in, so that loops streaming both (and the optimizer's state, placed a quarter page from
// each) never have their lines collide in the L1 (base/placed_floats.h). The table of (name,
// offset, shape) is what buckets, shards, pipeline stages, optimizers and checkpoints work from:
// each is a [offset, offset + numel) range.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/base/placed_floats.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::nn {

struct ParamEntry {
  std::string name;         // "fc1.weight"
  std::int64_t offset = 0;  // in elements, into params()/grads() (or buffers() for buffers)
  tensor::Shape shape;
  std::int64_t numel = 0;
  bool weight_decay = true;  // false for biases and batch-norm scales/shifts
};

class ParamStore {
 public:
  // Before finalize(): declare a trained tensor or a non-trained buffer; returns its index.
  int add_param(const std::string& name, const tensor::Shape& shape, bool weight_decay);
  int add_buffer(const std::string& name, const tensor::Shape& shape);
  // The index of the parameter declared as `name`, or -1. How a layer that shares another layer's
  // tensor (the transformer's output head, tied to the token embedding) finds it: the tensor is
  // declared once, so it is one entry, counted once, with one gradient range that both add into.
  int find_param(const std::string& name) const;
  // Lays out and allocates (zero-filled); after it no more declarations are accepted.
  void finalize();
  bool finalized() const { return finalized_; }

  tensor::Tensor param(int index);
  tensor::Tensor grad(int index);
  tensor::Tensor buffer(int index);

  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }
  // The gradient buffer's allocation, for ranks that read it in place (PlacedFloats::storage).
  std::shared_ptr<const void> grads_storage() const { return grads_.storage(); }
  float* buffers() { return buffers_.data(); }
  const float* buffers() const { return buffers_.data(); }
  std::int64_t num_params() const { return params_.size(); }
  std::int64_t num_buffer_elements() const { return static_cast<std::int64_t>(buffers_.size()); }

  const std::vector<ParamEntry>& param_entries() const { return param_entries_; }
  const std::vector<ParamEntry>& buffer_entries() const { return buffer_entries_; }

  void zero_grads();

 private:
  void require_finalized(const char* what) const;

  bool finalized_ = false;
  std::vector<ParamEntry> param_entries_;
  std::vector<ParamEntry> buffer_entries_;
  PlacedFloats params_;  // at page offset 0
  PlacedFloats grads_;   // at page offset PlacedFloats::kHalfPage
  std::vector<float> buffers_;
};

}  // namespace dtrain::nn
