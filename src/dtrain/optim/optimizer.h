// Optimizer: one update rule applied to [offset, offset + numel) ranges of the flat parameter and
// gradient buffers (nn::ParamStore lays every tensor out back to back; see docs/ARCHITECTURE.md,
// "The flat buffer").
//
// optim never sees a model: a caller describes the tensors it owns by Segments (name, offset,
// numel, weight_decay), which is all a whole model, a gradient bucket, a ZeRO shard or a pipeline
// stage needs. Rules that work per tensor (LARS) take their norms per segment, so a segment must be
// a whole tensor for them; element-wise rules (SGD, Adam, AdamW) accept any split.
//
// State layout: each kind of state (momentum, first moment, second moment) is ONE flat float vector
// of sum(numel) elements holding the segments packed back to back in the order given: segment i
// starts at sum_{j<i} numel_j. For the usual case of segments that tile [first, last) in order this
// is the parameter layout shifted by `first`, so a shard's state is as long as the shard. Adjacent
// segments that are contiguous in the parameter buffer and share the weight_decay flag are merged
// into one range, so the update is a few long vectorisable loops rather than one per tensor.
//
// Placement: the update streams parameters, gradients and every state vector side by side, and is
// slowed 1.3-2.8x on the development machine when two of them start at nearby offsets within
// their pages (base/placed_floats.h says why). So the state vectors are PlacedFloats, and step()
// first moves them (once; later steps only compare offsets) so that, for the largest range, the
// first state vector starts a quarter page after the parameters and the second three quarters:
// with nn::ParamStore's gradients half a page in, every stream is a quarter page from the next.
// Positions are chosen relative to the parameters and gradients actually passed, so other
// layouts (a parameter server's shard) get the quarter-page offsets that lie farthest from their
// gradients.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtrain/base/placed_floats.h"

namespace dtrain::optim {

// One named tensor of the flat parameter buffer: [offset, offset + numel) in elements.
// weight_decay is false for biases and batch-norm scales/shifts (nn::ParamEntry's flag).
struct Segment {
  std::string name;
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  bool weight_decay = true;
};

// The optimizer section of a run's config; keys are named `optim.<field>` in errors.
struct OptimizerConfig {
  std::string name = "sgd";   // "sgd" | "adam" | "adamw" | "lars" | "onebit_adam"
  double momentum = 0.0;      // sgd, lars; in [0, 1)
  bool nesterov = false;      // sgd only, needs momentum > 0
  double weight_decay = 0.0;  // sgd/lars/adam: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  double trust_coefficient = 0.001;               // lars (You et al. 2017, eta)
  double lars_eps = 1e-9;
  // onebit_adam (onebit_adam.h): exact Adam for this many steps, then v frozen and m sent in 1 bit.
  std::int64_t freeze_step = 100;
};

// A named flat state vector (momentum, first/second moments), laid out like the segments it covers
// (see "State layout" above). Names carry the optimizer ("sgd.momentum", "adam.exp_avg"), so a
// checkpoint written by one optimizer is not silently loaded into another.
struct StateTensor {
  std::string name;
  std::vector<float> values;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of params over every segment, using grads with the same layout. Both point at the
  // START of the flat buffers; segments give the offsets. lr is this step's learning rate (>= 0).
  // Elements outside every segment are neither read nor written.
  virtual void step(float* params, const float* grads, double lr) = 0;

  // One update in parts, where updates_in_parts(name): step_range updates the elements
  // [begin, end) of the parameter buffer that lie in this optimizer's segments, each with the
  // gradient grads[0][i] + grads[1][i] + ... (summed in that order; every buffer laid out like
  // params), in the same loop as the update: parallel::FusedZero1Reducer passes every rank's
  // gradient buffer, so the summed gradient is never stored. finish_step() then counts the update.
  // Parts must not overlap; with one buffer they give the same bits as step(). LARS's
  // step_range throws InternalError: its trust ratio needs whole tensors.
  virtual void step_range(float* params, std::span<const float* const> grads, double lr,
                          std::int64_t begin, std::int64_t end);
  void finish_step() { count_step(); }

  // Updates applied so far (Adam's bias correction uses it).
  std::int64_t steps() const { return steps_; }

  // For checkpoints: the state vectors, in a fixed order, each of state_numel() floats.
  virtual std::vector<StateTensor> state() const = 0;
  // Restores what state() returned and the step count; throws CheckpointError on a name, count or
  // size mismatch (naming both sides) or a non-finite value, leaving this optimizer unchanged.
  virtual void load_state(const std::vector<StateTensor>& state, std::int64_t steps) = 0;

  const std::vector<Segment>& segments() const { return segments_; }
  // sum(numel): the length of every state vector.
  std::int64_t state_numel() const { return state_numel_; }

 protected:
  // A maximal run of segments contiguous in the parameter buffer with one weight_decay flag.
  // param_offset indexes params/grads, state_offset the packed state vectors.
  struct Range {
    std::int64_t param_offset = 0;
    std::int64_t state_offset = 0;
    std::int64_t numel = 0;
    bool weight_decay = true;
  };

  // Validates the segments (numel >= 0, offset >= 0, no two overlapping) and builds the ranges;
  // throws ConfigError naming the segments.
  explicit Optimizer(std::vector<Segment> segments);

  const std::vector<Range>& ranges() const { return ranges_; }
  // Where segment i starts in the packed state vectors.
  std::int64_t state_offset(std::size_t segment) const { return state_offsets_[segment]; }
  void count_step() { ++steps_; }
  // Placement (above): moves each of `states` (state_numel() floats each, or empty) to its page
  // offset for these params and grads. Cheap after the first call.
  void place_state(const float* params, const float* grads,
                   std::initializer_list<PlacedFloats*> states);
  // The same for step_range, whose gradients are not in a flat buffer: placed as if they were
  // half a page from the parameters (nn::ParamStore's layout).
  void place_state_for_range(const float* params, std::initializer_list<PlacedFloats*> states);
  // Calls fn(range, first, count) for the part [first, first + count) (offsets into the range)
  // of every range that meets [begin, end), in order.
  template <typename Fn>
  void for_each_range_part(std::int64_t begin, std::int64_t end, Fn&& fn) const {
    for (const Range& range : ranges_) {
      const std::int64_t lo = std::max(begin, range.param_offset);
      const std::int64_t hi = std::min(end, range.param_offset + range.numel);
      if (lo < hi) fn(range, lo - range.param_offset, hi - lo);
    }
  }
  // step_range with three or more gradient buffers: sums the elements [at + b, at + e) of every
  // buffer, left to right as given (the ring reduce-scatter's order), kSumChunk at a time on the
  // stack, calling fn(offset, sums, n) for each chunk [offset, offset + n) of [b, e).
  static constexpr std::int64_t kSumChunk = 2048;
  template <typename Fn>
  static void for_each_summed_chunk(std::span<const float* const> grads, std::int64_t at,
                                    std::int64_t b, std::int64_t e, Fn&& fn) {
    std::array<float, kSumChunk> sums;
    for (std::int64_t lo = b; lo < e; lo += kSumChunk) {
      const std::int64_t n = std::min(kSumChunk, e - lo);
      std::copy(grads[0] + at + lo, grads[0] + at + lo + n, sums.begin());
      for (std::size_t k = 1; k < grads.size(); ++k) {
        const float* g = grads[k] + at + lo;
        for (std::int64_t i = 0; i < n; ++i) sums[static_cast<std::size_t>(i)] += g[i];
      }
      fn(lo, sums.data(), n);
    }
  }

  // Shared by the load_state implementations: checks `state` against the expected names (each of
  // state_numel() finite floats) and `steps` >= 0, throwing CheckpointError that names both sides.
  void check_state(const std::vector<StateTensor>& state, const std::vector<std::string>& names,
                   std::int64_t steps) const;
  void set_steps(std::int64_t steps) { steps_ = steps; }

 private:
  // The largest range: the one placement is computed for.
  const Range& anchor() const;
  // place_state's work, from the page offsets of the anchor's parameters (p) and gradients (g).
  void place_at(std::size_t p, std::size_t g, std::initializer_list<PlacedFloats*> states);

  std::vector<Segment> segments_;
  std::vector<std::int64_t> state_offsets_;
  std::vector<Range> ranges_;
  std::int64_t state_numel_ = 0;
  std::int64_t steps_ = 0;
};

// Checks every field of `config` against its range, whatever the optimizer (so a config can be
// checked before the model exists). Throws ConfigError naming the key (optim.name, optim.momentum,
// ...) with the value and the accepted values or range.
void validate_optimizer_config(const OptimizerConfig& config);

// Validates `config` and builds its optimizer over `segments`. Throws ConfigError naming the key
// (optim.name, optim.momentum, ...) with the value and the accepted values or range.
// Whether the optimizer `name` (optim.name) implements Optimizer::step_range: sgd, adam and
// adamw; not lars, whose trust ratio needs whole tensors.
bool updates_in_parts(const std::string& name);

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<Segment> segments);

}  // namespace dtrain::optim
