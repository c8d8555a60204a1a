// Tensor fusion (Horovod) / gradient buckets (PyTorch DDP): the gradients of consecutive parameter
// tensors grouped into buckets, each reduced with one allreduce.
//
// Why: an allreduce of n bytes costs about alpha x (messages) + beta x n; a model with T tensors
// reduced one by one pays T x alpha x (messages per call), one fused call pays it once. Buckets
// much smaller than the whole model still let the allreduce of the last layers start while
// backward computes the first ones (overlap), which one big bucket would not.
//
// Buckets are formed in reverse parameter order (the order backward finishes them): walking the
// tensors from last to first, a tensor joins the current bucket while the bucket stays within
// `fusion_bytes`; a tensor larger than that gets a bucket of its own; fusion_bytes = 0 puts every
// tensor in its own bucket. The flat gradient buffer is laid out in parameter order, so every
// bucket is one contiguous [offset, offset + count) range of it: no copy into a fusion buffer is
// needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/nn/param_store.h"

namespace dtrain::parallel {

struct GradientBucket {
  std::int64_t offset = 0;  // elements into the flat gradient buffer
  std::int64_t count = 0;   // elements
  // Parameter entries [first_entry, end_entry) of the store, in parameter order.
  std::size_t first_entry = 0;
  std::size_t end_entry = 0;
  // The bucket's gradients are final once backward has finished this layer (the lowest layer
  // index among its tensors: backward runs from the last layer to the first).
  std::size_t ready_after_layer = 0;
  // "fc3.bias..fc2.weight": its first and last tensor in backward order, for logs and traces.
  std::string name;
};

// entries: ParamStore::param_entries(); param_layer[k]: the layer of entry k
// (Model::param_layer()). Returns buckets in launch order (reverse parameter order).
std::vector<GradientBucket> make_gradient_buckets(const std::vector<nn::ParamEntry>& entries,
                                                  const std::vector<std::size_t>& param_layer,
                                                  std::int64_t fusion_bytes);

}  // namespace dtrain::parallel
