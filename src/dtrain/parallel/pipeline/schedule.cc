#include "dtrain/parallel/pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::parallel::pipeline {

namespace {

void check_arguments(int stage, int stages, int micro_batches) {
  DTRAIN_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1,
               "pipeline schedule for stage {} of {} with {} micro-batches", stage, stages,
               micro_batches);
}

// Forward of micro-batch k with its messages: receive the input (not on the first stage), compute,
// send the output (not on the last stage).
void add_forward(std::vector<Action>& list, int stage, int stages, int k) {
  if (stage > 0) list.push_back({ActionKind::kRecvActivation, k});
  list.push_back({ActionKind::kForward, k});
  if (stage + 1 < stages) list.push_back({ActionKind::kSendActivation, k});
}

void add_backward(std::vector<Action>& list, int stage, int stages, int k) {
  if (stage + 1 < stages) list.push_back({ActionKind::kRecvGradient, k});
  list.push_back({ActionKind::kBackward, k});
  if (stage > 0) list.push_back({ActionKind::kSendGradient, k});
}

}  // namespace

std::string_view schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kPipeDream: return "pipedream";
  }
  return "?";
}

ScheduleKind parse_schedule(std::string_view name, std::string_view key) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "pipedream") return ScheduleKind::kPipeDream;
  throw ConfigError(fmt::format(
      "{} = \"{}\" is not a pipeline schedule; accepted: gpipe, 1f1b, pipedream", key, name));
}

std::vector<Action> gpipe_schedule(int stage, int stages, int micro_batches) {
  check_arguments(stage, stages, micro_batches);
  std::vector<Action> list;
  for (int k = 0; k < micro_batches; ++k) add_forward(list, stage, stages, k);
  for (int k = 0; k < micro_batches; ++k) add_backward(list, stage, stages, k);
  return list;
}

std::vector<Action> one_f_one_b_schedule(int stage, int stages, int micro_batches) {
  check_arguments(stage, stages, micro_batches);
  std::vector<Action> list;
  // Warm-up: enough forwards that the last stage's first backward can start as soon as its
  // forward is done; stage s then keeps p - s micro-batches in flight in the steady state.
  const int warmup = std::min(stages - stage - 1, micro_batches);
  for (int k = 0; k < warmup; ++k) add_forward(list, stage, stages, k);
  int backward = 0;
  for (int k = warmup; k < micro_batches; ++k) {
    add_forward(list, stage, stages, k);
    add_backward(list, stage, stages, backward++);
  }
  for (; backward < micro_batches; ++backward) add_backward(list, stage, stages, backward);
  return list;
}

std::vector<Action> pipedream_schedule(int stage, int stages, int micro_batches, int carried) {
  check_arguments(stage, stages, micro_batches);
  const int lag = stages - 1 - stage;
  DTRAIN_CHECK(carried >= 0 && carried <= lag,
               "pipedream step on stage {} of {} carrying {} micro-batches (at most {})", stage,
               stages, carried, lag);
  std::vector<Action> list;
  int oldest = -carried;  // the oldest micro-batch in flight
  for (int k = 0; k < micro_batches; ++k) {
    add_forward(list, stage, stages, k);
    if (k + 1 - oldest > lag) {
      add_backward(list, stage, stages, oldest);
      list.push_back({ActionKind::kOptimizerStep, oldest});
      ++oldest;
    }
  }
  return list;
}

int pipedream_carried_after(int stage, int stages, int micro_batches, int carried) {
  return std::min(stages - 1 - stage, carried + micro_batches);
}

std::vector<Action> pipedream_drain(int stage, int stages, int carried) {
  DTRAIN_CHECK(
      stages >= 1 && stage >= 0 && stage < stages && carried >= 0 && carried <= stages - 1 - stage,
      "pipedream drain on stage {} of {} carrying {} micro-batches", stage, stages, carried);
  std::vector<Action> list;
  for (int k = -carried; k < 0; ++k) {
    add_backward(list, stage, stages, k);
    list.push_back({ActionKind::kOptimizerStep, k});
  }
  return list;
}

std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int micro_batches) {
  switch (kind) {
    case ScheduleKind::kGPipe: return gpipe_schedule(stage, stages, micro_batches);
    case ScheduleKind::kOneFOneB: return one_f_one_b_schedule(stage, stages, micro_batches);
    case ScheduleKind::kPipeDream: break;
  }
  std::vector<Action> list = pipedream_schedule(stage, stages, micro_batches, 0);
  const int left = pipedream_carried_after(stage, stages, micro_batches, 0);
  // The drain numbers the left ones -left .. -1; here they are m - left .. m - 1.
  for (Action action : pipedream_drain(stage, stages, left)) {
    action.micro_batch += micro_batches;
    list.push_back(action);
  }
  return list;
}

double bubble_fraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

double schedule_bubble(ScheduleKind kind, int stages, int micro_batches) {
  return kind == ScheduleKind::kPipeDream ? 0.0 : bubble_fraction(stages, micro_batches);
}

int peak_in_flight(const std::vector<Action>& actions) {
  int in_flight = 0;
  int peak = 0;
  for (const Action& action : actions) {
    if (action.kind == ActionKind::kForward) peak = std::max(peak, ++in_flight);
    if (action.kind == ActionKind::kBackward) --in_flight;
  }
  return peak;
}

std::string action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return "forward";
    case ActionKind::kBackward: return "backward";
    case ActionKind::kSendActivation: return "send activation";
    case ActionKind::kRecvActivation: return "recv activation";
    case ActionKind::kSendGradient: return "send gradient";
    case ActionKind::kRecvGradient: return "recv gradient";
    case ActionKind::kOptimizerStep: return "optimizer step";
  }
  return "?";
}

std::string action_name(const Action& action) {
  static constexpr const char* kShort[] = {"F", "B", "sendA", "recvA", "sendG", "recvG", "U"};
  return fmt::format("{}{}", kShort[static_cast<int>(action.kind)], action.micro_batch);
}

}  // namespace dtrain::parallel::pipeline
