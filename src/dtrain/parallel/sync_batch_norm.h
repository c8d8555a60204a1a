// Synchronized batch norm: every BatchNorm of a model computes its statistics over the global
// batch (all ranks' samples) instead of its own shard (PyTorch's SyncBatchNorm, Horovod's
// SyncBatchNormalization). Two allreduces per layer and step, both of 2F + 1 doubles or fewer:
// forward sums (sum x, sum x^2, count), backward sums (sum dy, sum dy*xhat); see nn/batch_norm.h.
// They are blocking calls on the compute thread, in layer order, which is the same on every rank.
#pragma once

#include <memory>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/model.h"
#include "dtrain/parallel/comm_group.h"

namespace dtrain::parallel {

// nn::GroupBatchNormReducer over the ranks of `comm` (through parallel::CommGroup).
class SyncBatchNormReducer final : public nn::BatchNormReducer {
 public:
  explicit SyncBatchNormReducer(comm::Communicator& comm) : group_(comm), sums_(group_) {}
  void reduce_statistics(nn::ChannelStats& stats) override { sums_.reduce_statistics(stats); }
  void reduce_gradient_sums(std::vector<double>& sum_dy,
                            std::vector<double>& sum_dy_xhat) override {
    sums_.reduce_gradient_sums(sum_dy, sum_dy_xhat);
  }

 private:
  CommGroup group_;
  nn::GroupBatchNormReducer sums_;
};

// Every BatchNorm of `model`, residual blocks' included, in layer order.
std::vector<nn::BatchNorm*> batch_norm_layers(nn::Model& model);

// Switches every BatchNorm of `model` to statistics over all ranks of `comm`; the returned reducer
// must outlive every forward and backward of the model.
std::unique_ptr<SyncBatchNormReducer> sync_batch_norm(nn::Model& model, comm::Communicator& comm);

}  // namespace dtrain::parallel
