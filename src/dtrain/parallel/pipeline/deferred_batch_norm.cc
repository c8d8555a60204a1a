#include "dtrain/parallel/pipeline/deferred_batch_norm.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "dtrain/base/error.h"

namespace dtrain::parallel::pipeline {

namespace {

void collect(nn::Layer& layer, std::vector<nn::BatchNorm*>& out) {
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(&layer)) out.push_back(bn);
  for (nn::Layer* child : layer.sublayers()) collect(*child, out);
}

float* buffer_of(nn::ParamStore& store, const std::string& name) {
  for (const auto& entry : store.buffer_entries()) {
    if (entry.name == name) return store.buffers() + entry.offset;
  }
  throw InternalError("deferred batch norm: no buffer " + name);
}

}  // namespace

// Adds every micro-batch's sums; leaves the statistics the layer uses as they are.
class DeferredBatchNorm::Recorder final : public nn::BatchNormReducer {
 public:
  explicit Recorder(nn::BatchNormReducer* inner) : inner_(inner) {}
  void reduce_statistics(nn::ChannelStats& stats) override {
    if (inner_ != nullptr) inner_->reduce_statistics(stats);
    if (total_.sum.empty()) {
      total_.sum.assign(stats.sum.size(), 0.0);
      total_.sum_sq.assign(stats.sum_sq.size(), 0.0);
    }
    for (std::size_t c = 0; c < stats.sum.size(); ++c) {
      total_.sum[c] += stats.sum[c];
      total_.sum_sq[c] += stats.sum_sq[c];
    }
    total_.count += stats.count;
  }
  void reduce_gradient_sums(std::vector<double>& sum_dy,
                            std::vector<double>& sum_dy_xhat) override {
    if (inner_ != nullptr) inner_->reduce_gradient_sums(sum_dy, sum_dy_xhat);
  }
  void clear() {
    total_.sum.clear();
    total_.sum_sq.clear();
    total_.count = 0;
  }
  const nn::ChannelStats& total() const { return total_; }
  nn::BatchNormReducer* inner() const { return inner_; }

 private:
  nn::BatchNormReducer* inner_;
  nn::ChannelStats total_;
};

DeferredBatchNorm::DeferredBatchNorm(nn::Model& model, nn::LayerRange range)
    : model_(model), range_(range) {
  std::vector<nn::BatchNorm*> found;
  for (std::size_t i = range.begin; i < range.end; ++i) collect(*model.layers()[i], found);
  for (nn::BatchNorm* bn : found) {
    Entry entry;
    entry.layer = bn;
    entry.running_mean = buffer_of(model.store(), bn->name() + ".running_mean");
    entry.running_var = buffer_of(model.store(), bn->name() + ".running_var");
    entry.recorder = std::make_unique<Recorder>(bn->reducer());
    bn->set_reducer(entry.recorder.get());
    layers_.push_back(std::move(entry));
  }
}

DeferredBatchNorm::~DeferredBatchNorm() {
  // Every slot's layers go back to their own reducer: the replicas copied the recorder's pointer
  // in reserve_slots, and a train-mode forward after this would otherwise call a freed object.
  for (std::size_t slot = 0; slot < model_.slots(); ++slot) {
    std::vector<nn::BatchNorm*> found;
    for (std::size_t i = range_.begin; i < range_.end; ++i) {
      collect(*model_.slot_layers(slot)[i], found);
    }
    for (nn::BatchNorm* bn : found) {
      for (const Entry& entry : layers_) {
        if (bn->reducer() == entry.recorder.get()) bn->set_reducer(entry.recorder->inner());
      }
    }
  }
}

void DeferredBatchNorm::begin() {
  for (Entry& entry : layers_) {
    const auto f = static_cast<std::size_t>(entry.layer->features());
    entry.saved_mean.assign(entry.running_mean, entry.running_mean + f);
    entry.saved_var.assign(entry.running_var, entry.running_var + f);
    entry.recorder->clear();
  }
}

void DeferredBatchNorm::end() {
  for (Entry& entry : layers_) {
    const nn::ChannelStats& total = entry.recorder->total();
    if (total.count == 0) continue;  // no train-mode forward since begin()
    const double momentum = entry.layer->momentum();
    const double n = static_cast<double>(total.count);
    for (std::size_t c = 0; c < total.sum.size(); ++c) {
      // nn::BatchNorm::forward's update, on the saved values, with the mini-batch's statistics.
      const double mean = total.sum[c] / n;
      const double var = std::max(total.sum_sq[c] / n - mean * mean, 0.0);
      entry.running_mean[c] =
          static_cast<float>((1.0 - momentum) * entry.saved_mean[c] + momentum * mean);
      entry.running_var[c] = static_cast<float>((1.0 - momentum) * entry.saved_var[c] +
                                                momentum * var * n / (n - 1.0));
    }
  }
}

}  // namespace dtrain::parallel::pipeline
