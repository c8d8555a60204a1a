#include "dtrain/train/strategies/spatial/spatial_strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "dtrain/base/error.h"

namespace dtrain::train {

namespace {

comm::CollectiveOptions group_options(const Config& config) {
  comm::CollectiveOptions options;
  options.algorithm = config.parallel.allreduce;
  return options;
}

// Bytes rank r sends in a ring allreduce of n elements of e bytes over p ranks
// (comm/algorithms/allreduce_ring.cc): e (2n - |b_r| - |b_(r+1) mod p|), block b of n being
// [b n / p, (b + 1) n / p).
double ring_allreduce_bytes(std::int64_t n, std::int64_t e, int r, int p) {
  const auto block = [&](int b) { return n * (b + 1) / p - n * b / p; };
  return static_cast<double>(e * (2 * n - block(r) - block((r + 1) % p)));
}

}  // namespace

Spatial::Spatial(const StrategyContext& context)
    : Strategy(context),
      comm_(required_communicator(context, "spatial")),
      group_(comm_, group_options(context.config)),
      split_(nn::split_spatially(context.model, group_)) {
  const nn::ParamStore& whole = context_.model.store();
  nn::ParamStore& local = split_.model->store();
  DTRAIN_CHECK_EQ(local.num_params(), whole.num_params());
  DTRAIN_CHECK_EQ(local.num_buffer_elements(), whole.num_buffer_elements());
  for (std::size_t k = 0; k < whole.param_entries().size(); ++k) {
    DTRAIN_CHECK(whole.param_entries()[k].name == local.param_entries()[k].name &&
                     whole.param_entries()[k].offset == local.param_entries()[k].offset,
                 "tensor {} of the split model is {}, unsplit {}", k, local.param_entries()[k].name,
                 whole.param_entries()[k].name);
  }
  // The unsplit model's initial values (the Trainer's seed), on every rank.
  std::copy(whole.params(), whole.params() + whole.num_params(), local.params());
  std::copy(whole.buffers(), whole.buffers() + whole.num_buffer_elements(), local.buffers());
  local_ = std::make_unique<LocalGradients>(context_.config, *split_.model, /*rank=*/0,
                                            /*ranks=*/1, context_.trace);
  local_->set_straggler_rank(context_.rank);
}

Spatial::~Spatial() = default;

void Spatial::set_data_replica(int replica, int replicas) {
  local_ = std::make_unique<LocalGradients>(context_.config, *split_.model, replica, replicas,
                                            context_.trace);
  local_->set_straggler_rank(context_.rank);
  replicas_ = replicas;
}

std::vector<optim::Segment> Spatial::optimizer_segments() const {
  std::vector<optim::Segment> segments;
  for (const auto& entry : split_.model->store().param_entries()) {
    segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
  }
  return segments;
}

std::unique_ptr<data::SharePlan> Spatial::share_plan(std::int64_t train_samples) const {
  return std::make_unique<data::GlobalBatchPlan>(train_samples, context_.config.train.batch_size, 0,
                                                 1, context_.config.train.accumulate_steps);
}

SpatialStepBytes Spatial::predicted_step_bytes(std::int64_t samples) const {
  const int p = comm_.size(), r = comm_.rank();
  const double b = static_cast<double>(samples);
  SpatialStepBytes bytes;
  for (const auto& halo : split_.halos) {
    bytes.halo += nn::halo_bytes(halo, r, p, samples, /*backward=*/false);
    // Backward sends the halo's gradient unless the convolution needs no input gradient: the
    // first layer of the model's first trainable layer.
    if (halo.inner || halo.layer > split_.model->first_trainable()) {
      bytes.halo += nn::halo_bytes(halo, r, p, samples, /*backward=*/true);
    }
  }
  bytes.gather = (p - 1) * 4.0 * b * static_cast<double>(split_.gathered_per_sample);
  const std::int64_t micro_batches =
      std::max<std::int64_t>(1, std::min(context_.config.train.accumulate_steps, samples));
  for (const std::int64_t f : split_.norm_features) {
    bytes.allreduce +=
        static_cast<double>(micro_batches) *
        (ring_allreduce_bytes(2 * f + 1, 8, r, p) + ring_allreduce_bytes(2 * f, 8, r, p));
  }
  // A split global pool allreduces B_m C floats per micro-batch (local_gradients.cc's slices).
  for (const std::int64_t c : split_.pooled_channels) {
    for (std::int64_t m = 0; m < micro_batches; ++m) {
      const std::int64_t rows = samples * (m + 1) / micro_batches - samples * m / micro_batches;
      bytes.allreduce += ring_allreduce_bytes(rows * c, 4, r, p);
    }
  }
  bytes.allreduce += ring_allreduce_bytes(split_.split_params, 4, r, p);
  return bytes;
}

SpatialStepBytes Spatial::sent_so_far() const {
  const comm::CommStats& stats = comm_.stats();
  SpatialStepBytes bytes;
  bytes.halo = static_cast<double>(stats.get("send").bytes_sent);
  bytes.gather = static_cast<double>(stats.get("allgather").bytes_sent);
  bytes.allreduce = static_cast<double>(stats.get("allreduce").bytes_sent);
  return bytes;
}

StepResult Spatial::step(const StepInput& input, optim::Optimizer& optimizer) {
  using Clock = TraceRecorder::Clock;
  whole_model_current_ = false;
  const comm::CommStats& stats = comm_.stats();
  const auto comm_seconds = [&] {
    return stats.get("send").seconds + stats.get("recv").seconds + stats.get("allgather").seconds +
           stats.get("allreduce").seconds;
  };
  const SpatialStepBytes before = sent_so_far();
  const double seconds_before = comm_seconds();
  const auto start = Clock::now();
  nn::take_band(input.x, comm_.rank(), comm_.size(), band_);
  const LocalGradients::Result result =
      local_->compute(band_, input.labels, input.step, static_cast<double>(input.global_count));
  nn::ParamStore& store = split_.model->store();
  // Each rank's gradients of the split layers come from its band: their sum is the whole batch's.
  group_.allreduce_sum(store.grads(), split_.split_params);
  const auto update_start = Clock::now();
  optimizer.step(store.params(), store.grads(), input.lr);
  const auto end = Clock::now();
  if (context_.trace.enabled()) {
    context_.trace.add("optimizer", "compute", TraceRecorder::kComputeThread, update_start, end,
                       fmt::format(R"({{"step":{}}})", input.step));
  }
  const SpatialStepBytes after = sent_so_far();
  sent_.halo += after.halo - before.halo;
  sent_.gather += after.gather - before.gather;
  sent_.allreduce += after.allreduce - before.allreduce;
  const SpatialStepBytes predicted = predicted_step_bytes(input.x.dim(0));
  predicted_.halo += predicted.halo;
  predicted_.gather += predicted.gather;
  predicted_.allreduce += predicted.allreduce;
  const double seconds = comm_seconds() - seconds_before;
  ++steps_;
  if (steps_ > 1) {
    ++measured_steps_;
    step_seconds_ += std::chrono::duration<double>(end - start).count();
    comm_seconds_ += seconds;
  }
  StepResult out;
  if (comm_.rank() == 0) {
    out.loss = result.mean_loss();
    out.correct = result.correct;
  }
  // The exchanges sit between layers: nothing overlaps them, so their time is waiting.
  out.comm = seconds;
  out.waiting = seconds;
  return out;
}

void Spatial::before_evaluation() {
  if (whole_model_current_) return;
  const nn::ParamStore& local = split_.model->store();
  nn::ParamStore& whole = context_.model.store();
  std::copy(local.params(), local.params() + local.num_params(), whole.params());
  std::copy(local.buffers(), local.buffers() + local.num_buffer_elements(), whole.buffers());
  whole_model_current_ = true;
}

std::vector<optim::StateTensor> Spatial::checkpoint_state(const optim::Optimizer& optimizer) {
  before_evaluation();  // rank 0 writes the whole model's parameters next
  return Strategy::checkpoint_state(optimizer);
}

void Spatial::restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                            optim::Optimizer& optimizer, const std::string& path) {
  // The Trainer has just loaded the checkpoint into the unsplit model: the same layout.
  const nn::ParamStore& whole = context_.model.store();
  nn::ParamStore& local = split_.model->store();
  std::copy(whole.params(), whole.params() + whole.num_params(), local.params());
  std::copy(whole.buffers(), whole.buffers() + whole.num_buffer_elements(), local.buffers());
  whole_model_current_ = true;
  Strategy::restore_state(std::move(state), optimizer_steps, optimizer, path);
}

std::vector<std::string> Spatial::describe() const {
  // On the grid each step takes this replica's share of the global batch.
  const std::int64_t batch = context_.config.train.batch_size / replicas_;
  const SpatialStepBytes bytes = predicted_step_bytes(batch);
  const auto& layers = split_.model->layers();
  return {fmt::format(
      "spatial: {} ranks, rows {} per rank; layers {} .. {} split (halo exchange before {} "
      "convolution(s), {} batch norm(s) summed over the ranks), gathered before {}; bytes sent by "
      "rank {} per step "
      "at B = {}: halo {:.3f} MB + gather {:.3f} MB + allreduce {:.3f} MB",
      comm_.size(), split_.model->sample_shape()[1], layers.front()->name(),
      layers[split_.split_layers - 1]->name(), split_.halos.size(), split_.norm_features.size(),
      split_.gathered_per_sample == 0  ? "none (the global pool's band sums are allreduced)"
      : split_.gathered_before.empty() ? "the loss"
                                       : split_.gathered_before,
      comm_.rank(), batch, bytes.halo / 1e6, bytes.gather / 1e6, bytes.allreduce / 1e6)};
}

nlohmann::json Spatial::summary(const RunTotalsView& totals) {
  const int p = comm_.size();
  constexpr int kFields = 9;
  std::vector<double> mine{step_seconds_,   comm_seconds_,     static_cast<double>(measured_steps_),
                           sent_.halo,      sent_.gather,      sent_.allreduce,
                           predicted_.halo, predicted_.gather, predicted_.allreduce};
  std::vector<double> all(static_cast<std::size_t>(kFields * p));
  comm_.allgather(mine.data(), all.data(), kFields, DType::kF64);
  const double steps = static_cast<double>(std::max<std::int64_t>(steps_, 1));
  nlohmann::json per_spatial_rank = nlohmann::json::array();
  for (int r = 0; r < p; ++r) {
    const double* row = all.data() + std::ptrdiff_t{r} * kFields;
    per_spatial_rank.push_back({{"rank", r},
                                {"measured_steps", row[2]},
                                {"step_seconds_mean", row[2] > 0 ? row[0] / row[2] : 0.0},
                                {"comm_seconds_mean", row[2] > 0 ? row[1] / row[2] : 0.0},
                                {"halo_bytes_sent_per_step", row[3] / steps},
                                {"gather_bytes_sent_per_step", row[4] / steps},
                                {"allreduce_bytes_sent_per_step", row[5] / steps},
                                {"halo_bytes_predicted_per_step", row[6] / steps},
                                {"gather_bytes_predicted_per_step", row[7] / steps},
                                {"allreduce_bytes_predicted_per_step", row[8] / steps}});
  }
  return {{"strategy", name()},
          {"ranks", p},
          {"transport", std::string(comm_.transport().name())},
          {"allreduce", context_.config.parallel.allreduce},
          {"rows_per_rank", split_.model->sample_shape()[1]},
          {"split_layers", split_.split_layers},
          {"split_parameters", split_.split_params},
          {"gathered_before", split_.gathered_before},
          {"bytes_sent_per_step_per_rank", sent_.total() / steps},
          {"bytes_sent_per_step_per_rank_predicted", predicted_.total() / steps},
          {"bytes_formula",
           "halo: sum over split convs 4 B C W ([r>0] bottom + [r<P-1] top) forward, top and "
           "bottom swapped backward + gather: (P-1) x 4 B C' h' W' + allreduce: ring(2F+1, 2F "
           "doubles per batch norm) + ring(B C floats per global pool) + ring(split parameters)"},
          {"per_spatial_rank", per_spatial_rank},
          {"per_rank", totals.per_rank_rows()}};
}

}  // namespace dtrain::train
