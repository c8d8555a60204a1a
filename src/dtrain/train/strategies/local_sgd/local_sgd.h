// Local SGD (parallel.strategy = "local_sgd"; docs/LOCAL_SGD.md): Lin et al. 2018, "Don't use
// large mini-batches, use local SGD"; PyTorch's PostLocalSGD. Each rank takes H =
// local_sgd.period optimizer steps on its own replica with its share of each global batch, then
// the replicas average their parameters with one allreduce (and their batch-norm statistics with a
// second, where the model has them). Seed 004
// counts the rounds of communication: synchronous SGD needs one per step (O(K) over K steps);
// local SGD needs K / H.
//
// Each rank's gradient is its share's mean gradient scaled by P x share / B, as if the share were
// a 1/P part of the global batch: with equal shares that is the share's plain mean, and for H = 1
// with an optimizer linear in the gradient (SGD with momentum, Nesterov, weight decay) the average
// of the P replicas' updates is exactly the synchronous update, every step, uneven shares included
// (each replica's momentum is its own; their mean follows the synchronous momentum). Adam's update
// is not linear, so H = 1 only approximates synchronous Adam.
//
// Averages run after every H-th local step, and after the epoch's last step whatever the count,
// so that evaluation and checkpoints see one model. An evaluation in the middle of an epoch
// (train.eval_every_steps) evaluates the average of the replicas and then gives each rank its own
// replica back, so that it does not change the training. The first local_sgd.synchronous_steps
// steps of the run average after every step (PostLocalSGD's warm-up: local steps early in training
// cost accuracy).
//
// Cost per rank and average (ring allreduce of N parameters of 4 bytes): 2 (P-1)/P x 4N bytes
// sent, 2(P-1) rounds; per step, that over H. Synchronous data parallelism sends the same bytes
// every step. The averages use parallel.allreduce; the formula printed beside the measurement is
// the ring's (other algorithms move other amounts).
//
// local_sgd.compression (docs/COMPRESSION.md, "Where each strategy uses the codecs"): a codec of
// compress/ for what each rank sends to an average. What it encodes is the model delta since the
// last average, d_r = x_r - x_avg (a cast of x_r itself would lose its low bits, and a sparsifier
// of x_r would zero most of the model), with error feedback per rank where the codec's default
// has it (top-k, random-k, sign): the part of d_r a codec left out is added to the next average's
// delta. The ranks exchange the payloads as data parallelism's compressed reducer does (allreduce
// of a summable payload, allgather of a gather codec's: strategies/compressed_mean.h), and every
// rank sets x_avg += mean_r decode(d_r), x_r = x_avg: the same bits everywhere. Batch-norm
// statistics are still averaged exactly (f32). Bytes per average: ring 2 (P-1)/P x
// encoded_bytes(N) for a summable codec, (P-1) x encoded_bytes(N) for a gather codec. Evaluation's
// mid-epoch average stays exact (f32): it measures the replicas, it does not change them.
//
// Checkpoints keep each rank's own optimizer state (momentum is local), allgathered (every rank
// holds the P states while a checkpoint is written; rank 0 writes them) and stored per rank
// ("rank3/momentum"); a resume needs the same number of ranks, and every rank refuses another.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtrain/train/strategies/compressed_mean.h"
#include "dtrain/train/strategy.h"

namespace dtrain::train {

class LocalSgd final : public Strategy {
 public:
  // Collective over context.comm (which must be set): broadcasts rank 0's parameters.
  explicit LocalSgd(const StrategyContext& context);
  std::string name() const override { return "local_sgd"; }
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
  double end_epoch() override;
  void before_evaluation() override;
  void after_evaluation() override;
  std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer) override;
  // Right after an average (the replicas equal, no local steps pending): checkpoints on a clock
  // and stops wait for it (at most period - 1 steps).
  bool can_checkpoint_now() const override { return local_steps_ == 0; }
  void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                     optim::Optimizer& optimizer, const std::string& path) override;
  std::vector<std::string> describe() const override;
  nlohmann::json summary(const RunTotalsView& totals) override;

  // The ring allreduce's bytes sent per rank for one average of `parameters` floats over `ranks`:
  // 2 (P-1)/P x 4N (what summary.json prints beside the measurement).
  static double average_bytes(std::int64_t parameters, int ranks);

 private:
  // Averages the replicas' parameters and buffers, counting it; returns the seconds it took.
  double average();
  // The averaging itself: allreduce (sum) of the parameters, then of the buffers, then / P.
  void mean_of_replicas();
  // local_sgd.compression: x_avg += mean_r decode(encode(x_r - x_avg)), x_r = x_avg; the buffers
  // exactly.
  void compressed_average();
  // The buffers' mean (allreduce sum / P), in place.
  void mean_of_buffers();

  // Bytes this rank has sent over comm_, all collectives together.
  double bytes_sent() const;

  comm::Communicator& comm_;
  std::int64_t local_steps_ = 0;     // steps since the last average
  std::int64_t averages_ = 0;        // averages this run
  double averaging_bytes_sent_ = 0;  // by this rank, in those averages
  // Mid-epoch evaluation: this replica's own parameters and buffers, restored afterwards.
  std::vector<float> saved_params_;
  std::vector<float> saved_buffers_;
  bool restore_after_evaluation_ = false;
  // local_sgd.compression other than none: the exchange, the last average x_avg and the delta.
  std::optional<CompressedMean> compressed_;
  std::vector<float> last_average_;
  std::vector<float> delta_;
};

}  // namespace dtrain::train
