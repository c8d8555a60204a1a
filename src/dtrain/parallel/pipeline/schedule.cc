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
  return kind == ScheduleKind::kGPipe ? "gpipe" : "1f1b";
}

ScheduleKind parse_schedule(std::string_view name, std::string_view key) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  throw ConfigError(
      fmt::format("{} = \"{}\" is not a pipeline schedule; accepted: gpipe, 1f1b", key, name));
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

std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int micro_batches) {
  return kind == ScheduleKind::kGPipe ? gpipe_schedule(stage, stages, micro_batches)
                                      : one_f_one_b_schedule(stage, stages, micro_batches);
}

double bubble_fraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
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
  }
  return "?";
}

std::string action_name(const Action& action) {
  static constexpr const char* kShort[] = {"F", "B", "sendA", "recvA", "sendG", "recvG"};
  return fmt::format("{}{}", kShort[static_cast<int>(action.kind)], action.micro_batch);
}

}  // namespace dtrain::parallel::pipeline
