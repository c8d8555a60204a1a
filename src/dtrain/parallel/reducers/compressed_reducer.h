// The compressed reducer (issue 20; docs/COMPRESSION.md): each bucket's gradients go through a
// codec of compress/ before they leave the rank, as PyTorch DDP's fp16 and PowerSGD
// communication hooks do, with error feedback per bucket where the spec has it (one residual
// buffer with the gradient layout) and PowerSGD's Q kept per bucket. What each bucket becomes is
// the decoded sum over the ranks, the same on every rank, and deterministic:
//
//   summable (fp16, bf16, random-k)  encode; allreduce the payload in the codec's wire dtype
//                                    (f16 / bf16 sums round each partial sum); decode once.
//                                    Bytes per rank: the allreduce's over encoded_bytes(n),
//                                    2 (P-1)/P x encoded_bytes(n) for ring.
//   gather (top-k, sign, QSGD)       encode; allgather the payloads (u8, ring: (P-1) x
//                                    encoded_bytes(n) sent per rank); zero the bucket and
//                                    decode_add rank 0's payload, then rank 1's, ...: every rank
//                                    adds in the same order, so the sums are bit-identical.
//   PowerSGD                         per weight matrix (rows x cols, its own shape): P = M Q,
//                                    allreduce P, orthogonalize, Q = M^T P, allreduce Q, tensor =
//                                    P Q^T (powersgd.h). One allreduce carries every matrix's P
//                                    and the bucket's exact elements (biases, norms, matrices too
//                                    small to gain: r (rows + cols) >= rows cols), a second every
//                                    Q. Bytes per rank: 2 (P-1)/P x 4 (sum r (rows + cols) +
//                                    exact elements). Tensors sent exactly are logged once.
//
// Seeds: a stochastic codec's seed is derived from (seed, bucket, step of that bucket) and, for
// gather codecs only, the rank (codec_seed()): summable payloads must line up across ranks
// (random-k's indices), gathered ones should not share their noise (QSGD's dithering).
//
// Overlap: for summable and gather codecs, reduce_async() encodes on the calling thread
// (backward's), starts the collective on the communicator's thread, and decodes on a thread of this
// reducer once the collective is done; the returned Work ends after the decode. All collectives are
// therefore issued from the calling thread, in bucket order, as the communicator's sequence numbers
// require. PowerSGD's second allreduce needs the first one's result, so its buckets are exchanged
// inside reduce_async() itself (blocking; the Work returned is already done): no overlap.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/task_queue.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/codec_spec.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/compress/powersgd.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/parallel/gradient_reducer.h"

namespace dtrain::parallel {

// The seed a codec gets for `bucket`'s `step`-th exchange (rank < 0: the one shared by all ranks).
std::uint64_t codec_seed(std::uint64_t seed, std::size_t bucket, std::int64_t step, int rank);

class CompressedReducer final : public GradientReducer {
 public:
  // spec: not none (compressed_reducer() gives none the plain allreduce reducer).
  // warmup_steps: each bucket's first exchanges are plain f32 allreduces (PyTorch PowerSGD's
  // start_powerSGD_iter: the early, fast-changing gradients go exact).
  // momentum_correction: beta > 0 is Deep Gradient Compression's momentum correction (Lin et al.
  // 2018): each rank keeps a velocity u = beta u + g (its own, N floats), which goes through error
  // feedback and the codec instead of g; elements the codec sent restart their u at 0 (factor
  // masking), so that a kept element's old momentum is not sent twice. During the warm-up u is
  // allreduced exactly (the sum of the ranks' u is the momentum of the summed gradient). The
  // optimizer's own momentum must then be 0. PowerSGD masks a subspace instead of elements: each
  // matrix's u loses its part in the span of this step's P^ (u -= P^ P^T u, 4 rows cols r flops),
  // the tensors it sends exactly restart at 0.
  CompressedReducer(const ReducerContext& context, const compress::CodecSpec& spec,
                    std::uint64_t seed, std::int64_t warmup_steps = 0,
                    float momentum_correction = 0.0f);
  ~CompressedReducer() override;

  // "topk:0.01 allgather", "fp16 allreduce", "powersgd:2 two allreduces".
  const char* collective() const override { return collective_.c_str(); }
  std::string algorithm() const override;
  void reduce(const GradientBucket& bucket, float* grads) override;
  comm::Work reduce_async(const GradientBucket& bucket, float* grads) override;

  // Checkpoints: what this rank's exchanges carry from one step to the next, so that a resumed run
  // continues bitwise (data_parallel_strategy.h stores it per rank):
  //   "compression/residual"    error feedback's residual (the gradient's layout; only with error
  //                             feedback)
  //   "compression/exchanges"   each bucket's exchange count (warm-up included): the codecs' seeds
  //                             depend on it, and so does the end of the warm-up
  //   "compression/powersgd_q"  PowerSGD: every low-rank piece's Q (the warm start), bucket by
  //                             bucket
  //   "compression/velocity"    momentum correction's u (the gradient's layout)
  // Cost: 4 (N + buckets + sum of Q sizes) bytes per rank.
  std::vector<optim::StateTensor> state() const;
  // Takes back what state() gave (the same names and sizes: the same run on as many ranks);
  // CheckpointError naming `path` otherwise.
  void load_state(const std::vector<optim::StateTensor>& state, const std::string& path);

 private:
  // PowerSGD's view of a bucket: one low-rank piece per tensor that gains from it (a weight
  // matrix in its own shape: rows = dim 0, cols = the rest), the other elements (biases, norms,
  // small matrices) exchanged exactly beside the P factors; a bucket without tensor entries (a
  // bare range) is one near-square piece.
  struct LowRankPiece {
    std::int64_t offset = 0;  // into the bucket
    std::int64_t count = 0;
    std::unique_ptr<compress::PowerSgd> power;  // null: exchanged exactly
  };
  struct BucketState {
    std::vector<std::uint8_t> payload;   // this rank's encoded bucket
    std::vector<std::uint8_t> gathered;  // gather: every rank's payload, rank r at r x size
    std::vector<LowRankPiece> pieces;    // PowerSGD only
    std::vector<float> first;            // PowerSGD: every piece's P, then the exact elements
    std::vector<float> second;           // PowerSGD: every piece's Q
    std::int64_t steps = 0;
  };

  std::size_t index_of(const GradientBucket& bucket) const;
  // Encodes the bucket (error feedback included) into its payload; returns the bucket's step.
  std::int64_t encode(std::size_t b, const GradientBucket& bucket, const float* grads);
  // Momentum correction: u[bucket] = beta u[bucket] + grads; returns u[bucket].
  float* accumulate_velocity(const GradientBucket& bucket, const float* grads);
  // The payload's collective: started on the communicator's thread (async), or run here (the
  // Work returned is then done).
  comm::Work exchange(std::size_t b, bool async);
  // The bucket's sum from the exchanged payload(s) of that step.
  void decode(std::size_t b, const GradientBucket& bucket, float* grads, std::int64_t step);
  void reduce_powersgd(std::size_t b, const GradientBucket& bucket, float* grads);
  // The pieces of bucket b (see LowRankPiece); the names of tensors sent exactly go to `exact`.
  void plan_pieces(std::size_t b, std::vector<std::string>& exact);

  compress::CodecSpec spec_;
  std::uint64_t seed_;
  std::int64_t warmup_steps_;
  std::vector<std::int64_t> exchanges_;  // per bucket, warm-up ones included
  std::string collective_;
  comm::CollectiveOptions gather_options_;  // allgather has one algorithm (ring)
  std::unique_ptr<compress::Codec> codec_;  // null for PowerSGD
  std::optional<compress::ErrorFeedback> feedback_;
  std::vector<float> sent_;  // decode(payload) for error feedback, the largest bucket's size
  float momentum_correction_;
  std::vector<float> velocity_;  // momentum correction's u, the gradient's layout (or empty)
  std::vector<BucketState> states_;
  // Decodes async exchanges; declared last so that it drains before the buffers above go.
  comm::TaskQueue decoder_;
};

// Built once the buckets exist (GradientSynchronizer's DataParallelOptions::reducer). `seed`:
// the stochastic codecs' randomness, the same on every rank.
ReducerFactory compressed_reducer(const compress::CodecSpec& spec, std::uint64_t seed = 0,
                                  std::int64_t warmup_steps = 0, float momentum_correction = 0.0f);

}  // namespace dtrain::parallel
