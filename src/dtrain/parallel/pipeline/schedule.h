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
//
// PipeDream (asynchronous 1F1B with weight stashing, Narayanan et al. 2019) has no flush: stage s
// keeps L = p - 1 - s micro-batches between a forward and its backward across step boundaries
// (F(n) then B(n - L)), and after each backward its optimizer step (kOptimizerStep) updates the
// stage's weights with that one micro-batch's gradient. A step's list therefore starts with the
// backwards of up to L micro-batches of earlier steps, numbered -carried .. -1 (micro-batch k of
// the list is micro-batch k of this step; the executor's run_continued maps them to the run's
// count), and leaves up to L in flight for the next step; pipedream_drain() runs the ones left
// (before an evaluation, a checkpoint, at each epoch's end). Bubble: 0 in the steady state; a
// drain and the warm-up after it cost (p - 1)(F + B) once, as one flush of 1F1B does. Stage s
// holds at most p - s micro-batches of activations and as many stashed weight versions.
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
  kOptimizerStep,   // PipeDream: update this stage's weights with the micro-batch's gradient
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int micro_batch = 0;
  bool operator==(const Action&) const = default;
};

enum class ScheduleKind { kGPipe, kOneFOneB, kPipeDream };

// "gpipe", "1f1b", "pipedream".
std::string_view schedule_name(ScheduleKind kind);
// Accepts schedule_name()'s names; ConfigError naming `key` and the accepted values otherwise.
ScheduleKind parse_schedule(std::string_view name, std::string_view key);

// Stage `stage`'s actions for one step of `micro_batches` micro-batches over `stages` stages.
std::vector<Action> gpipe_schedule(int stage, int stages, int micro_batches);
std::vector<Action> one_f_one_b_schedule(int stage, int stages, int micro_batches);
// PipeDream: one step of m micro-batches on a stage that holds `carried` micro-batches of earlier
// steps (0 after a drain), at most p - 1 - stage. F(k) for k = 0..m-1, each followed, once more
// than p - 1 - stage are in flight, by the oldest one's backward, its gradient send and its
// optimizer step.
std::vector<Action> pipedream_schedule(int stage, int stages, int micro_batches, int carried);
// The micro-batches a stage still holds after such a step: min(p - 1 - stage, carried + m).
int pipedream_carried_after(int stage, int stages, int micro_batches, int carried);
// The backwards (with their messages and optimizer steps) of the `carried` micro-batches -carried
// .. -1 left by the last step.
std::vector<Action> pipedream_drain(int stage, int stages, int carried);
// For the flush schedules, one step; for PipeDream, one step from an empty pipeline followed by its
// drain (what a run of one step does).
std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int micro_batches);

// (p - 1) / (m + p - 1): the idle fraction of every stage's step when F and B are the same on all
// stages and messages cost nothing.
double bubble_fraction(int stages, int micro_batches);
// The bubble formula of `kind`: bubble_fraction() for the flush schedules, 0 for PipeDream (its
// steady state; each drain costs one flush's bubble).
double schedule_bubble(ScheduleKind kind, int stages, int micro_batches);

// The most micro-batches a list holds between a forward and its backward: the activation slots a
// stage needs (GPipe: m; 1F1B: min(p - s, m); PipeDream in the steady state: p - s, which
// pipedream_schedule with carried = p - 1 - s shows, a step from empty min(p - s, m)).
int peak_in_flight(const std::vector<Action>& actions);

// "F3", "B0", "sendA2", "recvG1", "U0": for logs, traces and test failures.
std::string action_name(const Action& action);
std::string action_kind_name(ActionKind kind);

}  // namespace dtrain::parallel::pipeline
