#include "dtrain/parallel/reducers/onebit_adam_reducer.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/optim/onebit_adam.h"

namespace dtrain::parallel {

OneBitAdamReducer::OneBitAdamReducer(const ReducerContext& context, std::int64_t freeze_step)
    : GradientReducer(context),
      freeze_step_(freeze_step),
      count_(context.model.store().num_params()),
      allreduce_(context.comm, context.model.store().num_params(), context.collective) {}

const char* OneBitAdamReducer::collective() const {
  return steps_ < freeze_step_ ? "allreduce (1-bit Adam warm-up)"
                               : "none (1-bit Adam: the momentum goes in the update)";
}

std::string OneBitAdamReducer::algorithm() const {
  return context_.collective.algorithm.empty() ? context_.comm.options().allreduce_algorithm
                                               : context_.collective.algorithm;
}

void OneBitAdamReducer::reduce(const GradientBucket& bucket, float* grads) {
  if (steps_ >= freeze_step_) return;
  context_.comm.allreduce(grads, bucket.count, DType::kF32, comm::ReduceOp::kSum,
                          context_.collective);
}

comm::Work OneBitAdamReducer::reduce_async(const GradientBucket& bucket, float* grads) {
  if (steps_ < freeze_step_) {
    return context_.comm.allreduce_async(grads, bucket.count, DType::kF32, comm::ReduceOp::kSum,
                                         context_.collective);
  }
  comm::Work done("1-bit Adam: the bucket stays local");
  done.finish(nullptr);
  return done;
}

void OneBitAdamReducer::update(optim::Optimizer& optimizer, double lr) {
  auto* onebit = dynamic_cast<optim::OneBitAdam*>(&optimizer);
  DTRAIN_CHECK(onebit != nullptr, "the 1-bit Adam reducer needs optim.name = onebit_adam");
  DTRAIN_CHECK(onebit->frozen() == (steps_ >= freeze_step_),
               "1-bit Adam: the reducer is at step {}, the optimizer at {}", steps_,
               onebit->steps());
  DTRAIN_CHECK_EQ(onebit->state_numel(), count_);
  nn::ParamStore& store = context_.model.store();
  const auto scale = static_cast<float>(context_.comm.size());
  exchange_start_ = exchange_end_ = std::chrono::steady_clock::now();
  onebit->step(store.params(), store.grads(), lr, scale, [this](std::span<float> momentum) {
    exchange_start_ = std::chrono::steady_clock::now();
    allreduce_.average(momentum.data());
    exchange_end_ = std::chrono::steady_clock::now();
  });
  ++steps_;
}

void OneBitAdamReducer::set_steps(std::int64_t steps) { steps_ = steps; }

std::vector<optim::StateTensor> OneBitAdamReducer::state() const {
  const auto worker = allreduce_.worker_error();
  const auto server = allreduce_.server_error();
  return {{"compression/onebit_worker_error", {worker.begin(), worker.end()}},
          {"compression/onebit_server_error", {server.begin(), server.end()}}};
}

void OneBitAdamReducer::load_state(const std::vector<optim::StateTensor>& state,
                                   const std::string& path) {
  const std::vector<optim::StateTensor> expected = this->state();
  std::vector<const optim::StateTensor*> found;
  for (const optim::StateTensor& want : expected) {
    const auto it = std::find_if(state.begin(), state.end(),
                                 [&](const optim::StateTensor& t) { return t.name == want.name; });
    if (it == state.end() || it->values.size() != want.values.size()) {
      throw CheckpointError(fmt::format(
          "checkpoint {}: {} {} ({} floats expected): it was written by another model or "
          "optimizer; resume it with the run's own resolved.toml",
          path, want.name, it == state.end() ? "is missing" : "has another size",
          want.values.size()));
    }
    found.push_back(&*it);
  }
  allreduce_.set_errors(found[0]->values, found[1]->values);
}

ReducerFactory onebit_adam_reducer(std::int64_t freeze_step) {
  return [freeze_step](const ReducerContext& context) {
    return std::make_unique<OneBitAdamReducer>(context, freeze_step);
  };
}

}  // namespace dtrain::parallel
