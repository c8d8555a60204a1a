#include "dtrain/parallel/pipeline/executor.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"

namespace dtrain::parallel::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::int64_t bytes_of(const tensor::Tensor& t) { return t.numel() * 4; }

}  // namespace

StageExecutor::StageExecutor(comm::Communicator& comm)
    : comm_(comm), stage_(comm.rank()), stages_(comm.size()) {}

std::size_t StageExecutor::slot_for(int micro_batch) {
  if (continued_) {
    const std::int64_t number = continued_base_ + micro_batch;
    for (const auto& [n, slot] : continued_slot_) {
      if (n == number) return slot;
    }
    DTRAIN_CHECK(!free_slots_.empty(), "stage {}: no free activation slot for micro-batch {}",
                 stage_, number);
    const std::size_t slot = free_slots_.back();
    free_slots_.pop_back();
    continued_slot_.emplace_back(number, slot);
    return slot;
  }
  auto& slot = slot_of_[static_cast<std::size_t>(micro_batch)];
  if (slot < 0) {
    DTRAIN_CHECK(!free_slots_.empty(), "stage {}: no free activation slot for micro-batch {}",
                 stage_, micro_batch);
    slot = static_cast<std::ptrdiff_t>(free_slots_.back());
    free_slots_.pop_back();
  }
  return static_cast<std::size_t>(slot);
}

void StageExecutor::ensure_slots(std::size_t slots) {
  if (activation_in_.size() < slots) {
    activation_in_.resize(slots);
    gradient_in_.resize(slots);
    activation_sent_.resize(slots);
    gradient_sent_.resize(slots);
    output_.resize(slots, nullptr);
    input_grad_.resize(slots, nullptr);
  }
}

StageStats StageExecutor::run(const std::vector<Action>& actions, int micro_batches,
                              StageCompute& compute,
                              const std::function<void(const ActionSpan&)>& on_action) {
  DTRAIN_CHECK(!continued_ || continued_slot_.empty(),
               "stage {}: a flush schedule while {} micro-batches of a continued run are in flight",
               stage_, continued_slot_.size());
  continued_ = false;
  StageStats stats;
  stats.peak_in_flight = peak_in_flight(actions);
  const auto slots = static_cast<std::size_t>(stats.peak_in_flight);
  ensure_slots(slots);
  free_slots_.clear();
  for (std::size_t s = slots; s-- > 0;) free_slots_.push_back(s);  // slot 0 first
  slot_of_.assign(static_cast<std::size_t>(micro_batches), -1);
  for (const Action& action : actions) {
    DTRAIN_CHECK(action.micro_batch >= 0 && action.micro_batch < micro_batches,
                 "stage {}: action {} outside {} micro-batches", stage_, action_name(action),
                 micro_batches);
  }
  const Clock::time_point begin = Clock::now();
  execute(actions, compute, on_action, /*continued=*/false, stats);
  const Clock::time_point flush = Clock::now();
  for (std::size_t s = 0; s < slots; ++s) {
    activation_sent_[s].wait();
    gradient_sent_[s].wait();
  }
  const Clock::time_point end = Clock::now();
  stats.waiting_seconds += seconds_between(flush, end);
  stats.seconds = seconds_between(begin, end);
  return stats;
}

StageStats StageExecutor::run_continued(const std::vector<Action>& actions, int micro_batches,
                                        std::size_t slots, StageCompute& compute,
                                        const std::function<void(const ActionSpan&)>& on_action) {
  if (!continued_) {
    // First call (or the first after flush-schedule runs): all slots free, numbering from 0.
    continued_ = true;
    continued_slot_.clear();
    continued_base_ = 0;
    free_slots_.clear();
    for (std::size_t s = slots; s-- > 0;) free_slots_.push_back(s);
  }
  ensure_slots(slots);
  for (const Action& action : actions) {
    DTRAIN_CHECK(action.micro_batch < micro_batches && continued_base_ + action.micro_batch >= 0,
                 "stage {}: action {} outside the run's micro-batches ({} started before, {} now)",
                 stage_, action_name(action), continued_base_, micro_batches);
  }
  StageStats stats;
  const Clock::time_point begin = Clock::now();
  execute(actions, compute, on_action, /*continued=*/true, stats);
  stats.peak_in_flight = static_cast<int>(slots);
  if (micro_batches == 0 && continued_slot_.empty()) {
    // A drain (every stage drains at the same point): each message posted has a receiver that
    // takes it in this drain. After a step a send may be owed to a neighbour's next call, so
    // nothing is waited for then (the slot's next use waits).
    const Clock::time_point flush = Clock::now();
    for (std::size_t s = 0; s < activation_sent_.size(); ++s) {
      activation_sent_[s].wait();
      gradient_sent_[s].wait();
    }
    stats.waiting_seconds += seconds_between(flush, Clock::now());
  }
  stats.seconds = seconds_between(begin, Clock::now());
  continued_base_ += micro_batches;
  return stats;
}

void StageExecutor::execute(const std::vector<Action>& actions, StageCompute& compute,
                            const std::function<void(const ActionSpan&)>& on_action, bool continued,
                            StageStats& stats) {
  const int previous = stage_ - 1;
  const int next = stage_ + 1;
  // A micro-batch done on this stage: its slot may take the next one.
  const auto release = [&](std::size_t slot) {
    free_slots_.push_back(slot);
    if (!continued) return;
    for (auto it = continued_slot_.begin(); it != continued_slot_.end(); ++it) {
      if (it->second == slot) {
        continued_slot_.erase(it);
        break;
      }
    }
  };
  for (const Action& action : actions) {
    const int k = action.micro_batch;
    const std::size_t slot = action.kind == ActionKind::kOptimizerStep ? last_slot_ : slot_for(k);
    const Clock::time_point start = Clock::now();
    switch (action.kind) {
      case ActionKind::kRecvActivation: {
        tensor::Tensor& buffer = activation_in_[slot];
        buffer.ensure_shape(compute.input_shape(k));
        comm_.recv(buffer.data(), buffer.numel(), DType::kF32, previous, kActivationTag);
        stats.bytes_received += bytes_of(buffer);
        stats.waiting_seconds += seconds_between(start, Clock::now());
        break;
      }
      case ActionKind::kForward: {
        activation_sent_[slot].wait();  // the slot's output buffer is about to be overwritten
        const Clock::time_point compute_start = Clock::now();
        stats.waiting_seconds += seconds_between(start, compute_start);
        const tensor::Tensor* input = stage_ > 0 ? &activation_in_[slot] : nullptr;
        output_[slot] = &compute.forward(k, slot, input);
        stats.compute_seconds += seconds_between(compute_start, Clock::now());
        break;
      }
      case ActionKind::kSendActivation: {
        const tensor::Tensor& output = *output_[slot];
        activation_sent_[slot] =
            comm_.isend(output.data(), output.numel(), DType::kF32, next, kActivationTag);
        stats.bytes_sent += bytes_of(output);
        break;
      }
      case ActionKind::kRecvGradient: {
        tensor::Tensor& buffer = gradient_in_[slot];
        // An earlier step's micro-batch: the shape of what its forward returned (the compute knows
        // only this step's micro-batch sizes).
        buffer.ensure_shape(continued ? output_[slot]->shape() : compute.output_shape(k));
        comm_.recv(buffer.data(), buffer.numel(), DType::kF32, next, kGradientTag);
        stats.bytes_received += bytes_of(buffer);
        stats.waiting_seconds += seconds_between(start, Clock::now());
        break;
      }
      case ActionKind::kBackward: {
        gradient_sent_[slot].wait();  // the slot's input-gradient buffer is about to change
        const Clock::time_point compute_start = Clock::now();
        stats.waiting_seconds += seconds_between(start, compute_start);
        const tensor::Tensor* grad = stage_ + 1 < stages_ ? &gradient_in_[slot] : nullptr;
        input_grad_[slot] = &compute.backward(k, slot, grad);
        stats.compute_seconds += seconds_between(compute_start, Clock::now());
        last_slot_ = slot;
        break;
      }
      case ActionKind::kSendGradient: {
        const tensor::Tensor& grad = *input_grad_[slot];
        gradient_sent_[slot] =
            comm_.isend(grad.data(), grad.numel(), DType::kF32, previous, kGradientTag);
        stats.bytes_sent += bytes_of(grad);
        release(slot);
        break;
      }
      case ActionKind::kOptimizerStep: {
        compute.optimizer_step(k);
        stats.compute_seconds += seconds_between(start, Clock::now());
        break;
      }
    }
    if (action.kind == ActionKind::kBackward && stage_ == 0) release(slot);
    if (on_action) on_action(ActionSpan{action, slot, start, Clock::now()});
  }
}

}  // namespace dtrain::parallel::pipeline
