#include "dtrain/nn/param_store.h"

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

void check_unique(const std::vector<ParamEntry>& a, const std::vector<ParamEntry>& b,
                  const std::string& name) {
  const auto same = [&](const ParamEntry& e) { return e.name == name; };
  if (std::any_of(a.begin(), a.end(), same) || std::any_of(b.begin(), b.end(), same)) {
    throw InternalError(fmt::format("ParamStore: tensor name '{}' declared twice", name));
  }
}

}  // namespace

int ParamStore::add_param(const std::string& name, const tensor::Shape& shape, bool weight_decay) {
  if (finalized_) throw InternalError("ParamStore::add_param after finalize()");
  check_unique(param_entries_, buffer_entries_, name);
  ParamEntry entry{name, 0, shape, tensor::shape_numel(shape), weight_decay};
  param_entries_.push_back(entry);
  return static_cast<int>(param_entries_.size()) - 1;
}

int ParamStore::add_buffer(const std::string& name, const tensor::Shape& shape) {
  if (finalized_) throw InternalError("ParamStore::add_buffer after finalize()");
  check_unique(param_entries_, buffer_entries_, name);
  ParamEntry entry{name, 0, shape, tensor::shape_numel(shape), false};
  buffer_entries_.push_back(entry);
  return static_cast<int>(buffer_entries_.size()) - 1;
}

int ParamStore::find_param(const std::string& name) const {
  for (std::size_t i = 0; i < param_entries_.size(); ++i) {
    if (param_entries_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

void ParamStore::finalize() {
  if (finalized_) return;
  std::int64_t offset = 0;
  for (auto& entry : param_entries_) {
    entry.offset = offset;
    offset += entry.numel;
  }
  params_ = PlacedFloats(offset, 0);
  grads_ = PlacedFloats(offset, PlacedFloats::kHalfPage);
  offset = 0;
  for (auto& entry : buffer_entries_) {
    entry.offset = offset;
    offset += entry.numel;
  }
  buffers_.assign(static_cast<std::size_t>(offset), 0.0f);
  finalized_ = true;
}

void ParamStore::require_finalized(const char* what) const {
  if (!finalized_) throw InternalError(fmt::format("ParamStore::{} before finalize()", what));
}

tensor::Tensor ParamStore::param(int index) {
  require_finalized("param");
  const auto& e = param_entries_.at(static_cast<std::size_t>(index));
  return tensor::Tensor::view(params_.data() + e.offset, e.shape);
}

tensor::Tensor ParamStore::grad(int index) {
  require_finalized("grad");
  const auto& e = param_entries_.at(static_cast<std::size_t>(index));
  return tensor::Tensor::view(grads_.data() + e.offset, e.shape);
}

tensor::Tensor ParamStore::buffer(int index) {
  require_finalized("buffer");
  const auto& e = buffer_entries_.at(static_cast<std::size_t>(index));
  return tensor::Tensor::view(buffers_.data() + e.offset, e.shape);
}

void ParamStore::zero_grads() {
  float* g = grads_.data();
  compute_pool().parallel_for(num_params(), 65536, [g](std::int64_t begin, std::int64_t end) {
    std::fill(g + begin, g + end, 0.0f);
  });
}

}  // namespace dtrain::nn
