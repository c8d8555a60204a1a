// Pipeline schedules as lists of actions, one list per stage (DeepSpeed's PipeSchedule, PyTorch's
// torch.distributed.pipelining): a schedule says only what each stage does in which order; one
// executor (executor.h) runs any list over the communicator's point-to-point messages.
//
// p stages, m micro-batches per step, F and B the time of one micro-batch's forward and backward
// on one stage. Both schedules here flush at the end of every step (all m backwards done before the
// update), so the update is the one of the unsplit model on the whole batch, and both have the same
// bubble: each stage idles (p - 1)(F + B) of a step of (m + p - 1)(F + B), the fraction
//
//     bubble = (p - 1) / (m + p - 1)                         (GPipe, Huang et al. 2019, eq. in
//     s. 2.3)
//
// (1 stage: 0; 2 stages, 8 micro-batches: 1/9 = 11%; 4 stages, 8: 3/11 = 27%).
//   - GPipe: every forward, then every backward. A stage holds the activations of all m
//     micro-batches at once: m slots.
//   - 1F1B (PipeDream-flush, Narayanan et al. 2021; Megatron-LM's and DeepSpeed's default): stage s
//     runs min(p - s - 1, m) warm-up forwards, then alternates one forward and one backward, then
//     drains the remaining backwards. The same bubble, but stage s holds at most min(p - s, m)
//     micro-batches of activations (at most p), independent of m.
// Backwards run in micro-batch order 0, 1, ..., m - 1 on every stage in both schedules, so each
// parameter's gradient is summed in the order of the unsplit model with m accumulation steps
// (train.accumulate_steps = m), which makes the two bitwise equal where the layers' arithmetic is.
//
// Messages: stage s sends micro-batch k's activation to s + 1 after forward(k) and its input
// gradient to s - 1 after backward(k); each receive sits right before the compute that needs it.
// Sends are posted without blocking (the executor waits for them later), receives block; with that
// rule every list here completes on every stage (tests/parallel/pipeline_schedule_test.cc
// simulates them for p = 1..4, m = 1..8).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::parallel::pipeline {

enum class ActionKind {
  kForward,         // forward of a micro-batch through this stage's layers
  kBackward,        // its backward (after the loss on the last stage)
  kSendActivation,  // forward's output to stage + 1
  kRecvActivation,  // this stage's input from stage - 1
  kSendGradient,    // backward's input gradient to stage - 1
  kRecvGradient,    // the gradient of this stage's output from stage + 1
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int micro_batch = 0;
  bool operator==(const Action&) const = default;
};

enum class ScheduleKind { kGPipe, kOneFOneB };

// "gpipe", "1f1b".
std::string_view schedule_name(ScheduleKind kind);
// Accepts schedule_name()'s names; ConfigError naming `key` and the accepted values otherwise.
ScheduleKind parse_schedule(std::string_view name, std::string_view key);

// Stage `stage`'s actions for one step of `micro_batches` micro-batches over `stages` stages.
std::vector<Action> gpipe_schedule(int stage, int stages, int micro_batches);
std::vector<Action> one_f_one_b_schedule(int stage, int stages, int micro_batches);
std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int micro_batches);

// (p - 1) / (m + p - 1): the idle fraction of every stage's step when F and B are the same on all
// stages and messages cost nothing.
double bubble_fraction(int stages, int micro_batches);

// The most micro-batches a list holds between a forward and its backward: the activation slots a
// stage needs (GPipe: m; 1F1B: min(p - s, m)).
int peak_in_flight(const std::vector<Action>& actions);

// "F3", "B0", "sendA2", "recvG1": for logs, traces and test failures.
std::string action_name(const Action& action);
std::string action_kind_name(ActionKind kind);

}  // namespace dtrain::parallel::pipeline
