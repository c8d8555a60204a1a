// Hogwild! on a dense model (the MLP, LeNet-5, a layer list without batch norm): T threads share
// one flat parameter vector without locks. A model with batch norm is refused: its running
// statistics are not trained parameters, so each thread would keep its own.
//
// Each thread owns a replica of the model (its activations, its gradient buffer, its own copy of
// the parameters) and runs mini-batch SGD on batches of the epoch's permutation: the permutation is
// cut into consecutive batches of batch_size (the last one shorter), and a free thread takes the
// next batch. One step of thread t, with P parameters and B samples:
//   1. snapshot    local[i] = shared[i]                        P relaxed atomic loads
//   2. compute     forward + softmax cross-entropy + backward on the replica (local parameters)
//   3. write back  shared[i] = shared[i] - lr (g_i + wd_i shared[i])   relaxed load + store
// with wd_i = weight_decay for parameters that take decay (not biases; nn::ParamEntry). The races
// are those of sparse Hogwild! (hogwild.h, docs/HOGWILD.md), stale snapshots and lost updates, and
// the atomics keep them defined; but here every step touches every parameter, so every pair of
// concurrent steps collides: this is asynchronous shared-memory SGD with staleness up to T - 1
// steps, not the sparse regime of the paper. The copy costs 3P memory accesses per step against
// ~2 x 3 x B x P flops of compute, small for B >= 16.
//
// With T = 1 this is sequential mini-batch SGD over the same batches, bit for bit. Each thread runs
// its kernels on a compute pool of one thread (ScopedComputePool).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/nn/model.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/parallel/hogwild.h"

namespace dtrain::parallel {

struct HogwildDenseOptions {
  int threads = 1;               // T >= 1
  std::int64_t batch_size = 32;  // B >= 1 per thread step
  float weight_decay = 0.0f;     // L2 on the parameters that take decay
  std::uint64_t seed = 0;        // initialisation, epoch orders, dropout
};

// Mean loss and accuracy over a data set.
struct DenseEvaluation {
  double loss = 0.0;
  double accuracy = 0.0;
};

class HogwildDense {
 public:
  // Builds T replicas of `spec` and initialises the shared parameters from options.seed. The data
  // set must outlive this object. ConfigError for threads < 1, batch_size < 1, a negative
  // weight_decay, and what nn::build_model rejects.
  HogwildDense(const nn::ModelSpec& spec, const data::Dataset& train, HogwildDenseOptions options);
  ~HogwildDense();

  // Runs epoch `epoch` (>= 0) at learning rate lr > 0 from position `start` of its order, pausing
  // as `pause` asks (hogwild.h; null: never). HogwildEpoch::updates counts samples.
  HogwildEpoch run_epoch(std::int64_t epoch, float lr, std::int64_t start = 0,
                         const HogwildPause* pause = nullptr);

  std::span<float> weights() { return shared_; }
  std::span<const float> weights() const { return shared_; }
  std::int64_t num_params() const { return static_cast<std::int64_t>(shared_.size()); }
  // The tensors of weights() (names, shapes, offsets): a checkpoint's parameter table.
  const std::vector<nn::ParamEntry>& param_entries() const {
    return replicas_.front()->store().param_entries();
  }

  // Loss and accuracy of the current shared parameters on `data` (eval mode), over the threads.
  // Not to be called while run_epoch runs.
  DenseEvaluation evaluate(const data::Dataset& data);

 private:
  const data::Dataset& train_;
  HogwildDenseOptions options_;
  std::vector<std::unique_ptr<nn::Model>> replicas_;
  std::vector<float> shared_;
  std::vector<float> decay_;  // per parameter: weight_decay or 0
};

}  // namespace dtrain::parallel
