// Straggler injection for experiments (seed "Revisiting distributed synchronous SGD"): makes chosen
// ranks slow, so that synchronous training, backup workers and asynchronous training can be
// compared under the same stragglers.
//
//   "rank=2,slowdown=3"            rank 2 takes 3x as long: after its forward and backward it
//                                  sleeps (slowdown - 1) x the time they took
//   "rank=2,delay_ms=40"           rank 2 sleeps a fixed 40 ms per step (a slow link or a busy
//                                  host); both keys together add
//   "random=exp,mean_ms=5"         every rank sleeps an exponential delay of mean 5 ms per step
//   "random=pareto,mean_ms=5,alpha=1.5"
//                                  a heavy-tailed (Pareto) delay of mean 5 ms (alpha > 1)
//   ""                             none
//
// Delays sleep rather than spin: a slow machine does not take cycles from the others, and on a
// machine with fewer cores than ranks a spinning straggler would slow everyone. On a rank that is a
// thread, the sleep ends early once another rank of the process fails or returns
// (comm::sleep_unless_aborted): a 600-s straggler must not hold the error of a 3-s deadline (or the
// end of a run) for 600 s. Random delays draw
// from Philox streams of (seed, rank, step): the same run gives the same delays.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::train {

struct StragglerSpec {
  enum class Kind { kNone, kSlowRank, kExponential, kPareto };
  Kind kind = Kind::kNone;
  int rank = -1;          // kSlowRank
  double slowdown = 1.0;  // kSlowRank: >= 1
  double delay_ms = 0.0;  // kSlowRank: >= 0, added after the slowdown's sleep
  double mean_ms = 0.0;   // random kinds: > 0
  double alpha = 1.5;     // kPareto: > 1
};

// Parses the forms above; ConfigError naming the text and the accepted forms otherwise.
StragglerSpec parse_straggler(const std::string& text);

// ConfigError when `text` slows a rank that a run of `ranks` worker ranks does not have (it would
// silently measure no straggler). Checked by the Trainer, and up front by dtrain sweep and bench
// scaling for each worker count.
void check_straggler_rank(const std::string& text, std::int64_t ranks);

// The delay rank `rank` adds at global step `step` whose forward and backward took
// `compute_seconds`; 0 for ranks the spec does not slow.
double straggler_delay_seconds(const StragglerSpec& spec, std::uint64_t seed, int rank,
                               std::int64_t step, double compute_seconds);

}  // namespace dtrain::train
