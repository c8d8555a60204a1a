#include "dtrain/train/strategies/tensor_parallel/tensor_parallel_strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "dtrain/base/error.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

namespace {

comm::CollectiveOptions group_options(const Config& config) {
  comm::CollectiveOptions options;
  options.algorithm = config.parallel.allreduce;
  return options;
}

// The unsplit model's spec; the vocabulary (the data's class count) is its output's last dimension.
nn::ModelSpec unsplit_spec(const StrategyContext& context) {
  return model_spec(context.config.model, context.model.sample_shape(),
                    context.model.output_shape(1).back());
}

}  // namespace

TensorParallel::TensorParallel(const StrategyContext& context)
    : Strategy(context),
      comm_(required_communicator(context, "tensor_parallel")),
      group_(comm_, group_options(context.config)) {
  const nn::ModelSpec spec = unsplit_spec(context_);
  const std::string& style = context_.config.tensor_parallel.style;
  if (spec.name == "gpt" && (style == "auto" || style == "megatron")) {
    split_ = nn::build_gpt_tensor_parallel(spec, group_);
  } else if (spec.name == "mlp" && (style == "auto" || style == "allgather")) {
    split_ = nn::build_mlp_tensor_parallel(spec, group_);
  } else if (spec.name == "layers") {
    // Linears as the built-in MLP's (auto, allgather) or in Megatron's pairs; attention and
    // transformer blocks always by heads (nn/layer_list_tensor_parallel.h).
    split_ = nn::build_layer_list_tensor_parallel(
        spec.layer_list,
        nn::LayerListInput{spec.input, spec.num_classes, spec.init, spec.init_sigma}, group_,
        style == "megatron" ? nn::LinearSplit::kMegatron : nn::LinearSplit::kAllGather);
  } else {
    throw ConfigError(fmt::format(
        "tensor_parallel.style = \"{}\" does not split model.name = \"{}\": megatron splits "
        "\"gpt\", allgather splits \"mlp\", both split \"layers\" (auto picks the one that "
        "fits)",
        style, spec.name));
  }
  const nn::ParamStore& full = context_.model.store();
  nn::ParamStore& local = split_.model->store();
  if (local.param_entries().size() != full.param_entries().size()) {
    throw InternalError(fmt::format(
        "tensor_parallel: the split model has {} tensors, the unsplit {} (model.name = \"{}\")",
        local.param_entries().size(), full.param_entries().size(), spec.name));
  }
  for (std::size_t k = 0; k < full.param_entries().size(); ++k) {
    const auto& whole = full.param_entries()[k];
    const auto& part = local.param_entries()[k];
    DTRAIN_CHECK(whole.name == part.name, "tensor {} of the split model is {}, unsplit {}", k,
                 part.name, whole.name);
    DTRAIN_CHECK_EQ(nn::shard_numel(split_.shards[k], whole.shape, comm_.size()), part.numel);
  }
  // The unsplit model's initial values (the Trainer's seed), this rank's parts of them.
  slice_from(full.params(), local.params());
  local_ = std::make_unique<LocalGradients>(context_.config, *split_.model, /*rank=*/0,
                                            /*ranks=*/1, context_.trace);
}

TensorParallel::~TensorParallel() = default;

void TensorParallel::set_data_replica(int replica, int replicas) {
  local_ = std::make_unique<LocalGradients>(context_.config, *split_.model, replica, replicas,
                                            context_.trace);
}

void TensorParallel::slice_from(const float* full, float* local) const {
  const nn::ParamStore& whole = context_.model.store();
  const nn::ParamStore& part = split_.model->store();
  for (std::size_t k = 0; k < whole.param_entries().size(); ++k) {
    const auto& w = whole.param_entries()[k];
    nn::slice_shard(split_.shards[k], w.shape, comm_.rank(), comm_.size(), full + w.offset,
                    local + part.param_entries()[k].offset);
  }
}

void TensorParallel::gather_into(const float* local, float* full) {
  const nn::ParamStore& whole = context_.model.store();
  const nn::ParamStore& part = split_.model->store();
  const int p = comm_.size();
  for (std::size_t k = 0; k < whole.param_entries().size(); ++k) {
    const auto& w = whole.param_entries()[k];
    const auto& l = part.param_entries()[k];
    const nn::ParamShard& shard = split_.shards[k];
    if (shard.kind == nn::ShardKind::kReplicated) {
      std::copy(local + l.offset, local + l.offset + l.numel, full + w.offset);
      continue;
    }
    gather_buffer_.resize(static_cast<std::size_t>(l.numel * p));
    group_.allgather(local + l.offset, gather_buffer_.data(), l.numel);
    for (int r = 0; r < p; ++r) {
      nn::place_shard(shard, w.shape, r, p, gather_buffer_.data() + std::ptrdiff_t{r} * l.numel,
                      full + w.offset);
    }
  }
}

std::vector<optim::Segment> TensorParallel::optimizer_segments() const {
  std::vector<optim::Segment> segments;
  for (const auto& entry : split_.model->store().param_entries()) {
    segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
  }
  return segments;
}

std::unique_ptr<data::SharePlan> TensorParallel::share_plan(std::int64_t train_samples) const {
  return std::make_unique<data::GlobalBatchPlan>(train_samples, context_.config.train.batch_size, 0,
                                                 1, context_.config.train.accumulate_steps);
}

double TensorParallel::predicted_step_bytes(std::int64_t samples) const {
  return split_.bytes_per_sample * static_cast<double>(samples);
}

StepResult TensorParallel::step(const StepInput& input, optim::Optimizer& optimizer) {
  using Clock = TraceRecorder::Clock;
  whole_model_current_ = false;
  const comm::OpStats before = collective_stats();
  const auto start = Clock::now();
  const LocalGradients::Result result =
      local_->compute(input.x, input.labels, input.step, static_cast<double>(input.global_count));
  nn::ParamStore& store = split_.model->store();
  const auto update_start = Clock::now();
  optimizer.step(store.params(), store.grads(), input.lr);
  const auto end = Clock::now();
  if (context_.trace.enabled()) {
    context_.trace.add("optimizer", "compute", TraceRecorder::kComputeThread, update_start, end,
                       fmt::format(R"({{"step":{}}})", input.step));
  }
  const comm::OpStats after = collective_stats();
  const double collective_seconds = after.seconds - before.seconds;
  step_bytes_sent_ += after.bytes_sent - before.bytes_sent;
  step_collectives_ += after.calls - before.calls;
  step_bytes_predicted_ += predicted_step_bytes(input.x.dim(0));
  ++steps_;
  if (steps_ > 1) {
    ++measured_steps_;
    step_seconds_ += std::chrono::duration<double>(end - start).count();
    collective_seconds_ += collective_seconds;
  }
  StepResult out;
  if (comm_.rank() == 0) {
    out.loss = result.mean_loss();
    out.correct = result.correct;
  }
  // The allreduces sit between layers: nothing overlaps them, so their time is waiting.
  out.comm = collective_seconds;
  out.waiting = collective_seconds;
  return out;
}

comm::OpStats TensorParallel::collective_stats() const {
  // The layers' f, g and all-gather calls; the gathers of evaluation and checkpoints run outside
  // the step and are not counted in its bytes.
  comm::OpStats sum = comm_.stats().get("allreduce");
  const comm::OpStats gathers = comm_.stats().get("allgather");
  sum.calls += gathers.calls;
  sum.bytes_sent += gathers.bytes_sent;
  sum.seconds += gathers.seconds;
  return sum;
}

void TensorParallel::before_evaluation() {
  if (whole_model_current_) return;
  gather_into(split_.model->store().params(), context_.model.store().params());
  whole_model_current_ = true;
}

std::vector<optim::StateTensor> TensorParallel::checkpoint_state(
    const optim::Optimizer& optimizer) {
  return gather_state(optimizer.state());
}

std::vector<optim::StateTensor> TensorParallel::gather_state(
    const std::vector<optim::StateTensor>& split) {
  before_evaluation();  // rank 0 writes the whole model's parameters next
  // The optimizer's state vectors follow the split store's layout (its segments tile it in
  // order), so they gather like the parameters.
  std::vector<optim::StateTensor> whole;
  const auto n = static_cast<std::size_t>(context_.model.store().num_params());
  for (const auto& tensor : split) {
    // Every optimizer of optim/ keeps per-parameter state (SGD, LARS: velocity; Adam: 2 moments).
    DTRAIN_CHECK_EQ(std::ssize(tensor.values), split_.model->store().num_params());
    std::vector<float> values(n);
    gather_into(tensor.values.data(), values.data());
    whole.push_back({tensor.name, std::move(values)});
  }
  return whole;
}

void TensorParallel::restore_state(std::vector<optim::StateTensor> state,
                                   std::int64_t optimizer_steps, optim::Optimizer& optimizer,
                                   const std::string& path) {
  Strategy::restore_state(slice_state(std::move(state), path), optimizer_steps, optimizer, path);
}

std::vector<optim::StateTensor> TensorParallel::slice_state(std::vector<optim::StateTensor> state,
                                                            const std::string& path) {
  // The Trainer has just loaded the checkpoint's parameters into the unsplit model.
  nn::ParamStore& local = split_.model->store();
  slice_from(context_.model.store().params(), local.params());
  const std::int64_t n = context_.model.store().num_params();
  std::vector<optim::StateTensor> mine;
  for (auto& tensor : state) {
    if (static_cast<std::int64_t>(tensor.values.size()) != n) {
      throw CheckpointError(fmt::format(
          "checkpoint {}: optimizer state '{}' holds {} values, the model has {} parameters "
          "(tensor_parallel stores one worker's layout)",
          path, tensor.name, tensor.values.size(), n));
    }
    std::vector<float> values(static_cast<std::size_t>(local.num_params()));
    slice_from(tensor.values.data(), values.data());
    mine.push_back({tensor.name, std::move(values)});
  }
  whole_model_current_ = true;
  return mine;
}

std::vector<std::string> TensorParallel::describe() const {
  const std::int64_t batch = context_.config.train.batch_size;
  return {fmt::format(
      "tensor_parallel: {} ranks, {}: {} of {} parameters per rank; per step {} = {} "
      "collectives, bytes sent per rank {} = {:.2f} MB at B = {}",
      comm_.size(), split_.description, split_.model->store().num_params(),
      context_.model.store().num_params(), split_.collectives_formula, split_.collectives_per_step,
      split_.bytes_formula, predicted_step_bytes(batch) / 1e6, batch)};
}

nlohmann::json TensorParallel::summary(const RunTotalsView& totals) {
  const int p = comm_.size();
  constexpr int kFields = 6;
  std::vector<double> mine{step_seconds_,
                           collective_seconds_,
                           static_cast<double>(measured_steps_),
                           static_cast<double>(step_bytes_sent_),
                           step_bytes_predicted_,
                           static_cast<double>(step_collectives_)};
  std::vector<double> all(static_cast<std::size_t>(kFields * p));
  comm_.allgather(mine.data(), all.data(), kFields, DType::kF64);
  nlohmann::json per_tp_rank = nlohmann::json::array();
  for (int r = 0; r < p; ++r) {
    const double* row = all.data() + std::ptrdiff_t{r} * kFields;
    per_tp_rank.push_back({{"rank", r},
                           {"measured_steps", row[2]},
                           {"step_seconds_mean", row[2] > 0 ? row[0] / row[2] : 0.0},
                           {"collective_seconds_mean", row[2] > 0 ? row[1] / row[2] : 0.0},
                           {"step_bytes_sent", row[3]},
                           {"step_bytes_predicted", row[4]}});
  }
  const double steps = static_cast<double>(std::max<std::int64_t>(steps_, 1));
  return {{"strategy", name()},
          {"ranks", p},
          {"transport", std::string(comm_.transport().name())},
          {"allreduce", context_.config.parallel.allreduce},
          {"style", context_.config.tensor_parallel.style},
          {"split", split_.description},
          {"parameters_per_rank", split_.model->store().num_params()},
          {"parameters_per_rank_formula", split_.parameters_formula},
          {"parameters_whole_model", context_.model.store().num_params()},
          {"collectives_per_step", static_cast<double>(step_collectives_) / steps},
          {"collectives_per_step_predicted", split_.collectives_per_step},
          {"collectives_per_step_formula", split_.collectives_formula},
          {"bytes_sent_per_step_per_rank", static_cast<double>(step_bytes_sent_) / steps},
          {"bytes_sent_per_step_per_rank_predicted", step_bytes_predicted_ / steps},
          {"bytes_formula", split_.bytes_formula},
          {"per_tensor_parallel_rank", per_tp_rank},
          {"per_rank", totals.per_rank_rows()}};
}

}  // namespace dtrain::train
