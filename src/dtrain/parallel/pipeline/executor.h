// StageExecutor: runs one pipeline stage's action list (schedule.h) for one step over the
// communicator's point-to-point messages, whatever the schedule.
//
// Stage s is rank s of the communicator: it receives activations from rank s - 1 and gradients
// from rank s + 1. Each micro-batch in flight takes an activation slot (Model::reserve_slots'
// slots, 0 .. peak_in_flight - 1) from its forward (or the receive before it) until its backward
// is done; the received input stays in the slot's receive buffer meanwhile, because the first
// layer keeps a view of its input for backward.
//
// Messages: a send is posted without blocking (Communicator::isend) and waited for only when its
// buffer is about to be overwritten (the slot's next forward or backward) or at the end of the
// step; a receive blocks where the list puts it. Activations travel with tag kActivationTag,
// gradients with kGradientTag, each FIFO in micro-batch order. Every wait has the communicator's
// deadline, so a stage that died makes its neighbours fail with its rank named, never hang.
// Bytes per step and stage: m x (activation + gradient) of one micro-batch at each boundary, e.g.
// 2 x B x T x d x 4 bytes per step for a GPT cut between two blocks.
//
// run() executes one step of a flush schedule (every micro-batch of the step done when it returns);
// run_continued() one step of PipeDream's (schedule.h), whose micro-batches may finish in a later
// call: it keeps the slots and their senders across calls and numbers micro-batches over the run.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/parallel/pipeline/schedule.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::parallel::pipeline {

inline constexpr std::uint64_t kActivationTag = 0x5001;
inline constexpr std::uint64_t kGradientTag = 0x5002;

// What a stage computes; the executor decides when and moves the tensors between stages.
class StageCompute {
 public:
  virtual ~StageCompute() = default;
  // The shape of micro-batch k's input activation (stages > 0 receive it) and of its output (the
  // gradient stages < p - 1 receive has it).
  virtual tensor::Shape input_shape(int micro_batch) const = 0;
  virtual tensor::Shape output_shape(int micro_batch) const = 0;
  // Forward of micro-batch k in activation slot `slot`. input: the received activation, null on
  // the first stage (it reads its own micro-batch). Returns the output, sent to the next stage (the
  // last stage computes its loss here and returns anything); it must stay unchanged until the
  // slot's next forward.
  virtual const tensor::Tensor& forward(int micro_batch, std::size_t slot,
                                        const tensor::Tensor* input) = 0;
  // Backward of micro-batch k (forwarded in `slot`). grad: the received gradient of the output,
  // null on the last stage (its loss gradient is its own). Returns the input gradient, sent to the
  // previous stage (ignored on the first); unchanged until the slot's next backward.
  virtual const tensor::Tensor& backward(int micro_batch, std::size_t slot,
                                         const tensor::Tensor* grad) = 0;
  // PipeDream (ActionKind::kOptimizerStep): update this stage's weights with micro-batch k's
  // gradient, right after its backward and gradient send. The flush schedules never call it.
  virtual void optimizer_step(int micro_batch) { (void)micro_batch; }
};

// One executed action, for the trace and the bubble.
struct ActionSpan {
  Action action;
  std::size_t slot = 0;
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
};

// One step of one stage.
struct StageStats {
  double seconds = 0.0;          // the whole action list, first action to last send completed
  double compute_seconds = 0.0;  // forwards and backwards
  double waiting_seconds = 0.0;  // blocked on receives and on sends' completion
  int peak_in_flight = 0;        // activation slots used
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
  // Idle time of the stage during the step / step time: the measured bubble.
  double idle_fraction() const { return seconds > 0.0 ? 1.0 - compute_seconds / seconds : 0.0; }
};

class StageExecutor {
 public:
  // This rank is stage comm.rank() of comm.size().
  explicit StageExecutor(comm::Communicator& comm);

  int stage() const { return stage_; }
  int stages() const { return stages_; }

  // Runs `actions` (this stage's list of a schedule over `micro_batches`) once. on_action, when
  // set, sees every action's span as it ends. Throws what compute or the messages throw.
  StageStats run(const std::vector<Action>& actions, int micro_batches, StageCompute& compute,
                 const std::function<void(const ActionSpan&)>& on_action = {});

  // A step of a schedule without a flush (PipeDream: pipedream_schedule / pipedream_drain).
  // Micro-batch k of `actions` is micro-batch base + k of the run, where base counts the
  // micro-batches started by earlier calls (k < 0: one of theirs still in flight); this call starts
  // `micro_batches` new ones. Slots (at most `slots`), what they hold and the sends posted carry
  // over to the next call; at the end, only a drain (micro_batches = 0, every stage at the same
  // point) that left nothing in flight waits for its sends: after a step, a neighbour may take
  // one in its next call. A gradient received
  // for an earlier step's micro-batch takes the shape of the output its forward returned. The
  // stats' seconds run from the first action to the last one's end.
  StageStats run_continued(const std::vector<Action>& actions, int micro_batches, std::size_t slots,
                           StageCompute& compute,
                           const std::function<void(const ActionSpan&)>& on_action = {});
  // Micro-batches started by run_continued and not yet through their backward on this stage.
  std::size_t continued_in_flight() const { return continued_slot_.size(); }

 private:
  std::size_t slot_for(int micro_batch);
  void ensure_slots(std::size_t slots);
  // The loop both runs share; `continued`: run_continued's numbering and shapes.
  void execute(const std::vector<Action>& actions, StageCompute& compute,
               const std::function<void(const ActionSpan&)>& on_action, bool continued,
               StageStats& stats);

  comm::Communicator& comm_;
  int stage_;
  int stages_;
  std::vector<tensor::Tensor> activation_in_;          // per slot: the received input
  std::vector<tensor::Tensor> gradient_in_;            // per slot: the received output gradient
  std::vector<comm::PendingMessage> activation_sent_;  // per slot
  std::vector<comm::PendingMessage> gradient_sent_;    // per slot
  std::vector<const tensor::Tensor*> output_;          // per slot: what its forward returned
  std::vector<const tensor::Tensor*> input_grad_;      // per slot: what its backward returned
  std::vector<std::size_t> free_slots_;
  std::vector<std::ptrdiff_t> slot_of_;  // per micro-batch; -1 before its first use
  // run_continued: the run's micro-batch number -> its slot, for those in flight; the number of
  // micro-batch 0 of the current call; whether the slots were set up.
  std::vector<std::pair<std::int64_t, std::size_t>> continued_slot_;
  std::int64_t continued_base_ = 0;
  bool continued_ = false;
  std::size_t last_slot_ = 0;  // the slot of the last backward (for an optimizer step's span)
};

}  // namespace dtrain::parallel::pipeline
