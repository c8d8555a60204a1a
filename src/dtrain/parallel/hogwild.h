// Hogwild! (Niu, Recht, Re, Wright, NIPS 2011): lock-free parallel SGD on a sparse linear model.
//
// T threads share one weight vector w (d floats) and no lock. Epoch e visits the permutation
// data::ShuffledSampler(N, seed).epoch_order(e), cut into consecutive chunks of 1024 samples; a
// thread takes the next chunk from a shared atomic counter when it has finished its last (so a
// thread the OS descheduled does not hold up the epoch) and runs plain per-sample SGD over it.
// For sample (x, y), y = +-1, with S the stored columns of x:
//   z = sum_{j in S} w_j x_j                                 (float, in column order)
//   g = y * loss'(y z)                                       (d loss / d z)
//   w_j <- w_j - lr * (g x_j + l2 w_j)      for j in S only  (L2 on the touched coordinates)
// with loss(m) = log(1 + exp(-m)) (logistic regression) or max(0, 1 - m) (linear SVM, hinge;
// loss'(1) = 0 is the subgradient taken). A sample whose update is zero (hinge with y z > 1 and
// l2 = 0) writes nothing. Cost: 2 k reads of w and k writes per sample with k = |S|, and the
// sample's record: the constructor copies the training set into one cache-line-aligned record per
// sample (sparse_records.h; 4 lines per random sample instead of CSR's ~6.5 at k = 20, for about
// 64 ceil((k + 1) / 8) + 8 more bytes per sample), which is what the epochs read.
//
// Every access to w during an epoch goes through std::atomic_ref<float> with memory_order_relaxed,
// and the read-modify-write of w_j is a relaxed load followed by a relaxed store, not a CAS loop:
// an update of another thread that lands between the two is overwritten (a lost update), and z
// may mix old and new coordinates. Those are exactly the races Hogwild! allows; relaxed atomics
// make them defined behaviour (no data race in the C++ sense, so ThreadSanitizer stays quiet) at
// the cost of plain loads and stores on x86-64. docs/HOGWILD.md explains why sparse SGD still
// converges.
//
// With T = 1 this is sequential SGD over the same order, bit for bit. Between epochs the threads
// are joined, so weights(), evaluate() and the epoch's statistics see every write.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dtrain/data/sparse_dataset.h"
#include "dtrain/parallel/sparse_records.h"

namespace dtrain::parallel {

enum class LinearLoss { kLogistic, kHinge };

// "logistic" -> kLogistic, "svm" or "hinge" -> kHinge; ConfigError naming the accepted names.
LinearLoss linear_loss_from_name(const std::string& name);
const char* linear_loss_name(LinearLoss loss);

// loss(m) at margin m = y z, computed stably in double.
double linear_loss(LinearLoss loss, double margin);
// d loss / d m at margin m, in float (what the updates use).
float linear_loss_derivative(LinearLoss loss, float margin);

struct HogwildOptions {
  LinearLoss loss = LinearLoss::kLogistic;
  int threads = 1;         // T >= 1
  float l2 = 0.0f;         // lambda >= 0
  std::uint64_t seed = 0;  // epoch orders
  bool shuffle = true;     // false: every epoch visits 0 .. N-1
};

// Checkpoints inside an epoch (docs/HOGWILD.md): after each of its steps (a chunk of samples, or
// a mini-batch of the dense engine) thread 0 asks `due`; when it says yes, every thread stops at
// its next step boundary and they meet (each wait with `timeout`); thread 0 then calls
// `at_pause(position, seconds)`: every sample of [0, position) of the epoch's order is trained and
// none after, `seconds` have passed since the threads started (HogwildEpoch::seconds' clock, which
// leaves out the epoch's serial shuffle), the parameters are still (no thread writes them until it
// returns). It returns whether the epoch ends there (a stop on SIGTERM); otherwise all go on. A
// pause due at the epoch's last step is not taken (the epoch's end is the caller's).
struct HogwildPause {
  std::function<bool()> due;
  std::function<bool(std::int64_t position, double seconds)> at_pause;
  std::chrono::milliseconds timeout{60000};
};

// One epoch's figures.
struct HogwildEpoch {
  std::int64_t updates = 0;  // samples visited, all threads (from the epoch's start position)
  // Where the epoch ended: its size, or the position of a pause whose at_pause returned true.
  std::int64_t position = 0;
  bool stopped = false;  // at_pause returned true
  double seconds = 0.0;  // wall time from starting the threads to joining them
  double updates_per_second = 0.0;
  std::vector<std::int64_t> thread_updates;  // T counts
  std::vector<double> thread_cpu_seconds;    // T: CPU time of each thread's updates

  // After the join, for an epoch of n samples begun at `start` and `began`: the time, where it
  // ended (n, or `stop_position` when a pause stopped it) and the updates from those.
  void finish(std::chrono::steady_clock::time_point began, bool stopped_at_pause,
              std::int64_t stop_position, std::int64_t start, std::int64_t n) {
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    stopped = stopped_at_pause;
    position = stopped ? stop_position : n;
    updates = position - start;
    updates_per_second = seconds > 0.0 ? static_cast<double>(updates) / seconds : 0.0;
  }
};

struct LinearEvaluation {
  double loss = 0.0;      // mean loss over the samples (without the L2 term)
  double accuracy = 0.0;  // fraction with sign(z) == y, z >= 0 counting as +1
};

class Hogwild {
 public:
  // w starts at 0 with train.num_features values. The data set must outlive this object and have
  // labels -1 / +1 (ConfigError otherwise, naming the sample). ConfigError for threads < 1 or a
  // negative or non-finite l2.
  Hogwild(const data::SparseDataset& train, HogwildOptions options);

  // Runs epoch `epoch` (>= 0; its shuffle) at learning rate lr > 0 on options.threads threads,
  // from position `start` of its order (a resume inside it), pausing as `pause` asks (null: never).
  HogwildEpoch run_epoch(std::int64_t epoch, float lr, std::int64_t start = 0,
                         const HogwildPause* pause = nullptr);

  std::span<float> weights() { return weights_; }
  std::span<const float> weights() const { return weights_; }
  const HogwildOptions& options() const { return options_; }

  // Loss and accuracy of the current weights on `data` (columns >= d contribute 0), over
  // options.threads threads. Not to be called while run_epoch runs.
  LinearEvaluation evaluate(const data::SparseDataset& data) const;

 private:
  const data::SparseDataset& train_;
  HogwildOptions options_;
  // The training samples as one line-aligned record each: what the update loop reads.
  SparseRecords records_;
  std::vector<float> weights_;
};

}  // namespace dtrain::parallel
