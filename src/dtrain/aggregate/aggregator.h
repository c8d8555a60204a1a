// Robust aggregation (docs/ROBUST.md): n input vectors of d floats (the gradients of n workers, f
// of which may be Byzantine: arbitrary) in, one vector of d floats out. Raw buffers, no tensors,
// no communication: the parameter server and the data-parallel path both call it.
//
// One aggregator per file: mean.h, median.h, trimmed_mean.h, krum.h (Krum and Multi-Krum),
// centered_clip.h, bucketing.h (shuffled buckets in front of any other); aggregator_spec.h parses
// their names. Each header gives its definition and cost. All are deterministic: the same inputs
// in the same order give the same bits, and ties are broken by input index. An aggregator keeps
// scratch (and centered clipping its centre) between calls: one per rank, not shared by threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dtrain::aggregate {

// n inputs, one pointer to d floats each.
using Inputs = std::span<const float* const>;

class Aggregator {
 public:
  virtual ~Aggregator() = default;

  // The spec aggregator_spec.h parses into this aggregator: "median", "trimmed:0.2",
  // "bucket:2,krum".
  virtual std::string name() const = 0;
  // How many of n inputs may be Byzantine with the aggregate still bounded by the honest ones
  // (docs/ROBUST.md gives each one's reason): 0 for the mean.
  virtual int tolerated(int n) const = 0;
  // Throws ConfigError, with the numbers, when n inputs cannot be aggregated (n < 1; Krum:
  // n <= 2f + 2). aggregate() calls it; callers may call it at setup to fail early.
  virtual void check_inputs(int n) const;

  // out (d) = the aggregate of inputs (n x d). out may be one of the inputs; otherwise it must
  // not overlap them.
  void aggregate(Inputs inputs, std::int64_t d, float* out);
  // rows: (n, d) row-major, input i at rows + i d.
  void aggregate(const float* rows, int n, std::int64_t d, float* out);

  // What the aggregator keeps between calls (centered clipping's centre, bucketing's call count),
  // as doubles for a checkpoint: an aggregator given load_state(state()) computes the next
  // aggregate bit for bit as this one would. Empty for the stateless ones (mean, median, trimmed
  // mean, Krum).
  virtual std::vector<double> state() const { return {}; }
  // Restores state(); InternalError for values of another length than this kind keeps.
  virtual void load_state(std::span<const double> values);
  // Whether `values` is a state() this kind keeps for inputs of length d (checked before any is
  // loaded, so that a checkpoint of another aggregator or bucket layout changes nothing).
  virtual bool state_fits(std::span<const double> values, std::int64_t /*d*/) const {
    return values.empty();
  }

 protected:
  // Called with checked arguments: n >= 1 (and check_inputs(n) passed), d >= 0.
  virtual void run(Inputs inputs, std::int64_t d, float* out) = 0;

 private:
  std::vector<const float*> row_pointers_;
};

}  // namespace dtrain::aggregate
