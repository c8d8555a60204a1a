#include "dtrain/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/base/timer.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/nn/loss.h"
#include "dtrain/parallel/optimizer_shards.h"
#include "dtrain/parallel/rank_agreement.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/ps_run.h"
#include "dtrain/train/statistics.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kEvalBatch = 1000;
// A target not reached yet, as stored among a checkpoint's scalars.
constexpr double kNotReached = -1.0;

std::string tta_scalar(double target) { return "tta:" + AccuracyTargets::key(target); }

// A resumed run repeats the epochs after its checkpoint, so records the interrupted run wrote for
// them are dropped first: metrics.jsonl then reads as one uninterrupted run.
void drop_records_after(const std::string& path, std::int64_t epoch) {
  if (!fs::exists(path)) return;
  std::istringstream in(read_whole_file(path));
  std::string kept;
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.contains("epoch")) continue;  // a torn last line
    if (record["epoch"].get<std::int64_t>() <= epoch) kept += line + "\n";
  }
  write_file_atomically(path, kept);
}

}  // namespace

nn::ModelSpec model_spec(const ModelSection& config, const tensor::Shape& sample_shape,
                         std::int64_t classes) {
  nn::ModelSpec spec;
  spec.name = config.name;
  spec.input = sample_shape;
  spec.num_classes = classes;
  spec.hidden = config.hidden;
  spec.activation = config.activation;
  spec.activation_alpha = static_cast<float>(config.activation_alpha);
  spec.dropout = static_cast<float>(config.dropout);
  spec.resnet_width = config.resnet_width;
  spec.resnet_blocks = config.resnet_blocks;
  spec.init = config.init;
  spec.init_sigma = static_cast<float>(config.init_sigma);
  return spec;
}

optim::OptimizerConfig optimizer_config(const OptimSection& config) {
  optim::OptimizerConfig out;
  out.name = config.name;
  out.momentum = config.momentum;
  out.nesterov = config.nesterov;
  out.weight_decay = config.weight_decay;
  out.beta1 = config.beta1;
  out.beta2 = config.beta2;
  out.eps = config.eps;
  out.trust_coefficient = config.trust_coefficient;
  return out;
}

optim::ScheduleConfig schedule_config(const Config& config, std::int64_t steps_per_epoch) {
  const auto& s = config.schedule;
  optim::ScheduleConfig out;
  out.base_lr = config.optim.lr;
  out.base_batch = s.base_batch;
  out.global_batch = config.train.batch_size;
  out.scaling = s.scaling;
  out.decay = s.decay;
  out.step_size = s.step_size;
  out.gamma = s.gamma;
  out.min_lr = s.min_lr;
  out.warmup = s.warmup;
  out.warmup_steps = s.warmup_epochs > 0 ? s.warmup_epochs * steps_per_epoch : s.warmup_steps;
  out.warmup_factor = s.warmup_factor;
  if (s.decay == "cosine") {
    out.total_steps =
        std::max<std::int64_t>(1, config.train.epochs * steps_per_epoch - out.warmup_steps);
  }
  return out;
}

Trainer::Trainer(Config config, TrainerOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  validate(config_);
  // Ranks that are threads get their own compute pools from the launcher (ScopedComputePool).
  if (options_.comm == nullptr) set_compute_threads(static_cast<int>(config_.train.threads));
  data_ = options_.data != nullptr ? options_.data
                                   : std::make_shared<const RunData>(load_run_data(config_.data));
  if (data_->train.size() == 0) {
    throw DataError(fmt::format("the training set of {} in {} is empty", config_.data.dataset,
                                config_.data.path));
  }
  model_ = nn::build_model(
      model_spec(config_.model, data_->train.sample_shape(), data_->train.num_classes));
  model_->init(static_cast<std::uint64_t>(config_.train.seed));
  if (options_.comm != nullptr) {
    comm::Communicator& comm = *options_.comm;
    rank_ = comm.rank();
    world_ = comm.size();
    parallel::check_same_on_all_ranks(comm, to_toml(config_), "the configuration");
    parallel::check_same_on_all_ranks(comm, parallel::parameter_layout(model_->store()),
                                      "the model's parameter layout");
  }
  if (options_.ps != nullptr) {
    if (options_.comm == nullptr) {
      throw InternalError("parameter-server training needs the workers' communicator");
    }
    start_parameter_servers();
  } else if (options_.comm != nullptr) {
    comm::Communicator& comm = *options_.comm;
    parallel::broadcast_parameters(comm, model_->store());
    parallel::DataParallelOptions dp;
    dp.algorithm = config_.parallel.allreduce;
    overlap_ = decide_overlap(config_.parallel.overlap,
                              overlap_inputs(static_cast<int>(config_.parallel.workers),
                                             static_cast<int>(config_.train.threads)));
    dp.overlap = overlap_.overlap;
    fusion_ = decide_fusion_bytes(config_.parallel.fusion_bytes, overlap_.overlap,
                                  model_->store().num_params() * 4);
    dp.fusion_bytes = fusion_.bytes;
    dp.check_headers = config_.parallel.check_headers;
    zero_ = decide_zero_stage(config_.parallel.zero_stage, comm.size(), config_.optim.name,
                              config_.parallel.allreduce);
    dp.shard_optimizer = zero_.shard;
    fused_ = decide_fused_update(
        config_.parallel.fused_update,
        FusedUpdateInputs{zero_.shard, overlap_.overlap, comm.shares_memory(), config_.optim.name});
    dp.fused_update = fused_.fused;
    dp.stall_warning = std::chrono::milliseconds(
        static_cast<std::int64_t>(config_.parallel.stall_warning_seconds * 1000.0));
    sync_ = std::make_unique<parallel::GradientSynchronizer>(comm, *model_, dp);
    if (config_.parallel.sync_batch_norm) bn_reducer_ = parallel::sync_batch_norm(*model_, comm);
  }
  // The optimizer updates every parameter, or with ZeRO-1 this rank's shard only.
  std::vector<optim::Segment> segments;
  if (sharded()) {
    segments = sync_->shard_segments();
  } else {
    for (const auto& entry : model_->store().param_entries()) {
      segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
    }
  }
  optimizer_ = optim::make_optimizer(optimizer_config(config_.optim), std::move(segments));
  // Steps per epoch: full batches, plus the last partial one when every rank gets at least one
  // sample of each micro-batch (data parallelism skips a smaller remainder on all ranks alike).
  const std::int64_t batch = config_.train.batch_size;
  const std::int64_t n = data_->train.size();
  const std::int64_t smallest = world_ * config_.train.accumulate_steps;
  if (batch < smallest) {
    throw ConfigError(fmt::format(
        "train.batch_size = {} is smaller than ranks x train.accumulate_steps = {} x {}: every "
        "rank needs at least one sample per micro-batch; raise train.batch_size",
        batch, world_, config_.train.accumulate_steps));
  }
  steps_per_epoch_ = n / batch + (n % batch >= smallest ? 1 : 0);
  if (ticketed()) {
    // Tickets: about tickets / workers steps each (a progress bar's and a schedule's epoch).
    const std::int64_t tickets = ps_tickets_per_epoch(config_, world_, n);
    steps_per_epoch_ = (tickets + world_ - 1) / world_;
  }
  if (steps_per_epoch_ == 0) {
    throw DataError(fmt::format(
        "the training set has {} samples, fewer than ranks x train.accumulate_steps = {}: nothing "
        "to train on",
        n, smallest));
  }
  schedule_ = std::make_unique<optim::LrSchedule>(schedule_config(config_, steps_per_epoch_));
  straggler_ = parse_straggler(config_.parallel.straggler);
  check_straggler_rank(config_.parallel.straggler, world_);
}

Trainer::~Trainer() = default;

std::int64_t ps_local_batch(const Config& config, std::int64_t workers) {
  return std::max<std::int64_t>(1, config.train.batch_size / workers);
}

std::int64_t ps_tickets_per_epoch(const Config& config, std::int64_t workers,
                                  std::int64_t train_samples) {
  const std::int64_t local = ps_local_batch(config, workers);
  return (train_samples + local - 1) / local;
}

bool Trainer::sharded() const { return sync_ != nullptr && sync_->options().shard_optimizer; }

bool Trainer::fused() const { return sync_ != nullptr && sync_->options().fused_update; }

std::vector<optim::StateTensor> Trainer::full_optimizer_state() {
  std::vector<optim::StateTensor> state = optimizer_->state();
  if (!sharded()) return state;
  // Each rank holds its shard's state; the sum of the zero-filled expansions is the whole (every
  // element is non-zero on one rank at most), the same layout as an unsharded run's.
  for (optim::StateTensor& tensor : state) {
    tensor.values =
        parallel::expand_state(optimizer_->segments(), tensor.values, model_->store().num_params());
    options_.comm->allreduce(tensor.values.data(), static_cast<std::int64_t>(tensor.values.size()),
                             DType::kF32, comm::ReduceOp::kSum);
  }
  return state;
}

bool Trainer::ticketed() const {
  return options_.ps != nullptr && config_.parallel.consistency != "bsp";
}

void Trainer::start_parameter_servers() {
  nn::ParamStore& store = model_->store();
  const ps::KeyRange all{0, store.num_params()};
  if (options_.ps->layout().total() != all.end) {
    throw InternalError(fmt::format("parameter servers hold {} keys, the model has {} parameters",
                                    options_.ps->layout().total(), all.end));
  }
  if (rank_ == 0) options_.ps->put(all, store.params());
  options_.comm->barrier();
  options_.ps->pull(all, store.params(), 0);
}

void Trainer::exchange_with_servers(std::int64_t step, std::int64_t local,
                                    std::int64_t global_count) {
  using Clock = TraceRecorder::Clock;
  nn::ParamStore& store = model_->store();
  const auto& p = config_.parallel;
  const bool pull = p.consistency != "async" || (step + 1) % p.pull_every == 0;
  const auto start = Clock::now();
  const ps::PushResult result = options_.ps->push({0, store.num_params()}, store.grads(),
                                                  {step, local, global_count, schedule_->lr(step)},
                                                  pull ? store.params() : nullptr);
  const auto end = Clock::now();
  if (result.dropped) ++dropped_steps_;
  last_step_.waiting = std::chrono::duration<double>(end - start).count();
  last_step_.comm = last_step_.waiting;
  if (trace_.enabled()) {
    trace_.add(pull ? "push and pull" : "push", "comm", TraceRecorder::kComputeThread, start, end,
               fmt::format(R"({{"step":{},"dropped":{}}})", step, result.dropped));
  }
}

float Trainer::compute_loss(const tensor::Tensor& logits, std::span<const std::int32_t> labels,
                            tensor::Tensor* dlogits) {
  if (config_.train.loss == "cross_entropy") {
    return nn::softmax_cross_entropy(logits, labels, dlogits);
  }
  // mse against one-hot targets: (B, C) with a 1 at each label.
  one_hot_.ensure_shape(logits.shape());
  one_hot_.zero();
  const std::int64_t classes = logits.dim(1);
  for (std::size_t b = 0; b < labels.size(); ++b) {
    one_hot_.data()[static_cast<std::int64_t>(b) * classes + labels[b]] = 1.0f;
  }
  return nn::mse_loss(logits, one_hot_, dlogits);
}

float Trainer::train_step(const tensor::Tensor& x, std::span<const std::int32_t> labels,
                          std::int64_t step, std::int64_t* correct, std::int64_t global_count) {
  using Clock = TraceRecorder::Clock;
  const auto step_start = Clock::now();
  const auto local = static_cast<std::int64_t>(labels.size());
  if (global_count == 0) global_count = local * world_;
  const std::int64_t micro_batches = std::min(config_.train.accumulate_steps, local);
  nn::ParamStore& store = model_->store();
  if (sync_) sync_->begin_step();
  double loss_sum = 0.0;
  std::int64_t correct_sum = 0;
  for (std::int64_t m = 0; m < micro_batches; ++m) {
    const std::int64_t begin = local * m / micro_batches;
    const std::int64_t end = local * (m + 1) / micro_batches;
    const bool whole = begin == 0 && end == x.dim(0);
    const tensor::Tensor micro = whole ? tensor::Tensor() : x.slice(begin, end);
    const tensor::Tensor& input = whole ? x : micro;
    const auto micro_labels =
        labels.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin));
    // Dropout streams: one per (step, micro-batch, rank); with one rank and no accumulation this
    // is `step`, as in a single-worker run.
    const auto stream = static_cast<std::uint64_t>((step * micro_batches + m) * world_ + rank_);
    const auto forward_start = Clock::now();
    const tensor::Tensor& logits = model_->forward(
        input, nn::ForwardContext{nn::Mode::kTrain, static_cast<std::uint64_t>(config_.train.seed),
                                  static_cast<std::int64_t>(stream)});
    const float value = compute_loss(logits, micro_labels, &dlogits_);
    if (correct != nullptr) correct_sum += nn::count_correct(logits, micro_labels);
    loss_sum += static_cast<double>(value) * static_cast<double>(end - begin);
    // The micro-batch's mean-loss gradient, weighted so that the sum over micro-batches and ranks
    // is the gradient of the global batch's mean loss.
    const float weight = static_cast<float>(end - begin) / static_cast<float>(global_count);
    if (weight != 1.0f) {
      float* d = dlogits_.data();
      for (std::int64_t i = 0; i < dlogits_.numel(); ++i) d[i] *= weight;
    }
    const auto forward_end = Clock::now();
    if (m == 0) {  // after the forward: see "zero the gradients" in trainer.h
      store.zero_grads();
      if (trace_.enabled()) {
        trace_.add("zero gradients", "compute", TraceRecorder::kComputeThread, forward_end,
                   Clock::now(), fmt::format(R"({{"step":{}}})", step));
      }
    }
    const auto backward_start = Clock::now();
    const bool last = m + 1 == micro_batches;
    if (sync_ && last) {
      model_->backward(dlogits_, [this](std::size_t layer) { sync_->on_layer_done(layer); });
    } else {
      model_->backward(dlogits_);
    }
    if (trace_.enabled()) {  // the argument strings cost allocations: only while tracing
      const std::string args = fmt::format(R"({{"step":{},"micro_batch":{}}})", step, m);
      trace_.add("forward", "compute", TraceRecorder::kComputeThread, forward_start, forward_end,
                 args);
      trace_.add("backward", "compute", TraceRecorder::kComputeThread, backward_start, Clock::now(),
                 args);
    }
  }
  last_step_ = StepTimes{};
  if (straggler_.kind != StragglerSpec::Kind::kNone) {
    // An injected straggler (train/straggler.h): its gradients arrive late, as a slow machine's.
    const double compute = std::chrono::duration<double>(Clock::now() - step_start).count();
    const double delay = straggler_delay_seconds(
        straggler_, static_cast<std::uint64_t>(config_.train.seed), rank_, step, compute);
    if (delay > 0.0) {
      const auto delay_start = Clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      trace_.add("straggler delay", "straggler", TraceRecorder::kComputeThread, delay_start,
                 Clock::now(), fmt::format(R"({{"step":{}}})", step));
    }
  }
  if (options_.ps != nullptr) {
    exchange_with_servers(step, local, global_count);
    last_step_.total = std::chrono::duration<double>(Clock::now() - step_start).count();
    if (correct != nullptr) *correct = correct_sum;
    return static_cast<float>(loss_sum / static_cast<double>(std::max<std::int64_t>(local, 1)));
  }
  if (sync_) {
    const auto wait_start = Clock::now();
    sync_->finish();
    last_step_.waiting = sync_->wait_seconds();
    const auto& buckets = sync_->buckets();
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const auto& t = sync_->timings()[b];
      last_step_.comm += std::chrono::duration<double>(t.finished - t.started).count();
      // Fused: no bucket collective ran (the barrier is the wait span below, the sums the
      // update's).
      if (trace_.enabled() && !fused()) {
        trace_.add(fmt::format("{} {}", sync_->gradient_collective(), buckets[b].name), "comm",
                   TraceRecorder::kCommThread, t.started, t.finished,
                   fmt::format(R"({{"step":{},"bucket":{},"bytes":{},"algorithm":"{}"}})", step, b,
                               buckets[b].count * 4,
                               sharded() ? std::string("ring") : config_.parallel.allreduce));
      }
    }
    if (trace_.enabled()) {
      trace_.add("wait for gradients", "wait", TraceRecorder::kComputeThread, wait_start,
                 Clock::now(), fmt::format(R"({{"step":{}}})", step));
    }
  }
  const auto update_start = Clock::now();
  if (fused()) {
    sync_->reduce_and_update(*optimizer_, store.params(), schedule_->lr(step));
  } else {
    optimizer_->step(store.params(), store.grads(), schedule_->lr(step));
  }
  const auto update_end = Clock::now();
  if (trace_.enabled()) {
    trace_.add(fused()     ? "fused reduce + update (shard)"
               : sharded() ? "optimizer (shard)"
                           : "optimizer",
               "compute", TraceRecorder::kComputeThread, update_start, update_end,
               fmt::format(R"({{"step":{}}})", step));
  }
  if (sharded()) {
    // ZeRO-1: every rank updated its shard; the allgather hands the new parameters to all.
    const auto [gather_start, gather_end] = sync_->gather_parameters();
    const double seconds = std::chrono::duration<double>(gather_end - gather_start).count();
    last_step_.comm += seconds;
    last_step_.waiting += seconds;
    if (trace_.enabled()) {
      trace_.add("allgather parameters", "comm", TraceRecorder::kComputeThread, gather_start,
                 gather_end,
                 fmt::format(R"({{"step":{},"bytes":{}}})", step, store.num_params() * 4));
    }
  }
  const auto step_end = Clock::now();
  last_step_.total = std::chrono::duration<double>(step_end - step_start).count();
  if (correct != nullptr) *correct = correct_sum;
  return static_cast<float>(loss_sum / static_cast<double>(std::max<std::int64_t>(local, 1)));
}

Trainer::Evaluation Trainer::evaluate(bool alone) {
  const data::Dataset& test = data_->test;
  const std::int64_t n = test.size();
  Evaluation result;
  if (n == 0) return result;
  // Rank r evaluates samples [n r / P, n (r + 1) / P); the sums are then added up over ranks.
  const int parts = alone ? 1 : world_;
  const int part = alone ? 0 : rank_;
  const std::int64_t first = n * part / parts;
  const std::int64_t last = n * (part + 1) / parts;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(last - first));
  std::iota(indices.begin(), indices.end(), first);
  tensor::Tensor x;
  std::vector<std::int32_t> y;
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  const std::int64_t mine = last - first;
  for (std::int64_t begin = 0; begin < mine; begin += kEvalBatch) {
    const std::int64_t count = std::min(kEvalBatch, mine - begin);
    data::gather_batch(test,
                       std::span(indices).subspan(static_cast<std::size_t>(begin),
                                                  static_cast<std::size_t>(count)),
                       x, y);
    const tensor::Tensor& logits = model_->forward(
        x, nn::ForwardContext{nn::Mode::kEval, static_cast<std::uint64_t>(config_.train.seed), 0});
    loss_sum += static_cast<double>(compute_loss(logits, y, nullptr)) * static_cast<double>(count);
    correct += nn::count_correct(logits, y);
  }
  double sums[2] = {loss_sum, static_cast<double>(correct)};
  if (options_.comm != nullptr && !alone) {
    options_.comm->allreduce(sums, 2, DType::kF64, comm::ReduceOp::kSum);
  }
  result.loss = sums[0] / static_cast<double>(n);
  result.accuracy = sums[1] / static_cast<double>(n);
  return result;
}

void Trainer::prepare_run_dir() {
  const fs::path dir(options_.run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create the run folder {}: {}; choose another --out",
                                  dir.string(), ec.message()));
  }
  if (!options_.resume && fs::exists(dir / "metrics.jsonl")) {
    throw ConfigError(fmt::format(
        "the run folder {} already holds a run (metrics.jsonl); continue it with --resume {} or "
        "choose another --out",
        dir.string(), dir.string()));
  }
}

RunSummary Trainer::run() {
  Stopwatch wall;
  const TrainSection& t = config_.train;
  const fs::path dir(options_.run_dir);
  const bool writer = rank_ == 0;  // rank 0 alone writes the run folder
  comm::Communicator* comm = options_.comm;
  if (writer) prepare_run_dir();
  CheckpointDir checkpoints((dir / "checkpoints").string(), t.keep_checkpoints);
  AccuracyTargets targets(t.accuracy_targets);
  const auto seed = static_cast<std::uint64_t>(t.seed);

  std::int64_t start_epoch = 0;
  std::int64_t start_position = 0;
  std::int64_t global_step = 0;
  std::int64_t samples = 0;
  double train_seconds = 0.0;
  double previous_wall = 0.0;
  double best_accuracy = 0.0;
  Evaluation last_eval;
  double last_train_loss = 0.0;
  if (options_.resume) {
    const std::string path = checkpoints.latest_path();
    const Checkpoint checkpoint = read_checkpoint(path);
    if (checkpoint.seed != seed) {
      throw CheckpointError(fmt::format(
          "checkpoint {} was written with train.seed = {} but the run's resolved.toml says {}",
          path, checkpoint.seed, seed));
    }
    restore_into(checkpoint, model_->store(), path);
    std::vector<optim::StateTensor> state;
    for (const auto& named : checkpoint.optimizer_state) {
      // ZeRO-1: this rank's shard of the full state (a length mismatch is reported by load_state).
      const bool whole = std::ssize(named.values) == model_->store().num_params();
      state.push_back({named.name, sharded() && whole
                                       ? parallel::pack_state(optimizer_->segments(), named.values)
                                       : named.values});
    }
    try {
      optimizer_->load_state(state, checkpoint.optimizer_steps);
    } catch (const CheckpointError& e) {
      throw CheckpointError(fmt::format("checkpoint {}: {}", path, e.what()));
    }
    start_epoch = checkpoint.sampler_epoch;
    start_position = checkpoint.sampler_position;
    global_step = checkpoint.global_step;
    samples = static_cast<std::int64_t>(checkpoint.scalar("samples", 0.0));
    train_seconds = checkpoint.scalar("train_seconds", 0.0);
    previous_wall = checkpoint.scalar("wall_seconds", 0.0);
    best_accuracy = checkpoint.scalar("best_test_accuracy", 0.0);
    last_eval.loss = checkpoint.scalar("final_test_loss", 0.0);
    last_eval.accuracy = checkpoint.scalar("final_test_accuracy", 0.0);
    last_train_loss = checkpoint.scalar("final_train_loss", 0.0);
    for (std::size_t i = 0; i < targets.targets().size(); ++i) {
      const double seconds = checkpoint.scalar(tta_scalar(targets.targets()[i]), kNotReached);
      if (seconds >= 0.0) targets.set_reached(i, seconds);
    }
    if (start_epoch >= t.epochs) {
      throw ConfigError(fmt::format(
          "checkpoint {} is at epoch {} and train.epochs = {}: nothing left to train; pass "
          "--epochs N with N > {} to train further",
          path, checkpoint.epoch, t.epochs, checkpoint.epoch));
    }
    if (writer) drop_records_after((dir / "metrics.jsonl").string(), checkpoint.epoch);
  }
  // Only now, with any checkpoint read and checked: a resume that fails leaves the folder as it
  // was (its resolved.toml still says how the run was trained).
  if (writer) write_file_atomically((dir / "resolved.toml").string(), to_toml(config_));
  const std::int64_t resumed_from = start_epoch;
  const std::int64_t first_step = global_step;

  // Other ranks' metrics go to /dev/null: every rank runs the same code, rank 0 keeps the record.
  MetricsLog metrics(writer ? (dir / "metrics.jsonl").string() : "/dev/null",
                     writer && options_.resume);
  Progress progress(options_.out, Progress::detect_style(options_.out, options_.quiet || !writer),
                    t.epochs);
  const std::int64_t n = data_->train.size();
  progress.message(fmt::format(
      "dtrain: {} ({} parameters) on {} ({} train / {} test samples), {} epochs of {} steps; "
      "run folder {}",
      config_.model.name, model_->store().num_params(), data_->train.name, n, data_->test.size(),
      t.epochs, steps_per_epoch_, dir.string()));
  if (options_.ps != nullptr) {
    const auto& p = config_.parallel;
    progress.message(fmt::format(
        "parameter servers: {} workers, {} servers, consistency {}{}{}{}", world_,
        options_.ps->layout().servers(), p.consistency,
        p.consistency == "ssp" ? fmt::format(" (staleness <= {})", p.staleness) : "",
        p.consistency == "async" && p.pull_every > 1
            ? fmt::format(", pull every {} steps", p.pull_every)
            : "",
        p.backup_workers > 0 ? fmt::format(", {} backup worker(s)", p.backup_workers) : ""));
  }
  if (sync_) {
    const auto& buckets = sync_->buckets();
    progress.message(fmt::format(
        "data parallel: {} ranks ({} per process), {}, {} gradient bucket(s): {}, overlap {}, "
        "batch norm {}",
        world_, config_.parallel.workers,
        sharded() ? "optimizer " + zero_.reason +
                        (fused() ? " (ZeRO-1: update 1/P, allgather)"
                                 : " (ZeRO-1: ring reduce-scatter, update 1/P, allgather)") +
                        ", gradient sums " + fused_.reason
                  : "allreduce " + config_.parallel.allreduce + ", optimizer " + zero_.reason,
        buckets.size(), fusion_.reason, overlap_.reason,
        config_.parallel.sync_batch_norm ? "synchronized" : "per rank"));
  }
  if (options_.resume) {
    progress.message(fmt::format("resuming at epoch {} (step {})", start_epoch, global_step));
  }

  auto elapsed = [&] { return previous_wall + wall.seconds(); };
  auto save = [&](std::int64_t epochs_done) {
    Checkpoint c;
    c.epoch = epochs_done;
    c.global_step = global_step;
    c.optimizer_steps = optimizer_->steps();
    c.seed = seed;
    c.sampler_epoch = epochs_done;
    c.sampler_position = 0;
    c.scalars = {{"samples", static_cast<double>(samples)},
                 {"train_seconds", train_seconds},
                 {"wall_seconds", elapsed()},
                 {"best_test_accuracy", best_accuracy},
                 {"final_test_loss", last_eval.loss},
                 {"final_test_accuracy", last_eval.accuracy},
                 {"final_train_loss", last_train_loss}};
    for (std::size_t i = 0; i < targets.targets().size(); ++i) {
      const auto& reached = targets.reached()[i];
      c.scalars.emplace_back(tta_scalar(targets.targets()[i]), reached ? *reached : kNotReached);
    }
    capture_from(model_->store(), c);
    for (auto& state : full_optimizer_state()) {
      c.optimizer_state.push_back({std::move(state.name), std::move(state.values)});
    }
    if (!writer) return;
    checkpoints.save(c, epochs_done);
  };

  // Per-rank totals for the compute / communication / waiting split.
  struct RankTotals {
    double samples = 0.0, seconds = 0.0, waiting = 0.0, comm = 0.0;
  };
  RankTotals run_totals;
  auto comm_bytes = [&](bool sent) {
    double bytes = 0.0;
    if (comm == nullptr) return bytes;
    for (const auto& [op, stats] : comm->stats().snapshot()) {
      bytes += static_cast<double>(sent ? stats.bytes_sent : stats.bytes_received);
    }
    return bytes;
  };
  const double sent_at_start = comm_bytes(true);
  const double received_at_start = comm_bytes(false);
  // One row per rank: what the epoch record and summary.json report for it.
  auto rank_rows = [&](const RankTotals& totals) {
    std::vector<double> mine{totals.samples,
                             totals.seconds,
                             totals.seconds - totals.waiting,
                             totals.comm,
                             totals.waiting,
                             comm_bytes(true) - sent_at_start,
                             comm_bytes(false) - received_at_start};
    const std::size_t width = mine.size();
    std::vector<double> all(width * static_cast<std::size_t>(world_));
    if (comm != nullptr) {
      comm->allgather(mine.data(), all.data(), static_cast<std::int64_t>(width), DType::kF64);
    } else {
      all = mine;
    }
    nlohmann::json rows = nlohmann::json::array();
    for (int r = 0; r < world_; ++r) {
      const double* v = all.data() + static_cast<std::size_t>(r) * width;
      rows.push_back({{"rank", r},
                      {"samples", v[0]},
                      {"train_seconds", v[1]},
                      {"samples_per_second", v[0] / std::max(v[1], 1e-9)},
                      {"compute_seconds", v[2]},
                      {"comm_seconds", v[3]},
                      {"wait_seconds", v[4]},
                      {"bytes_sent", v[5]},
                      {"bytes_received", v[6]}});
    }
    return rows;
  };

  if (comm != nullptr) comm->barrier();  // a common time origin for the trace
  if (config_.parallel.trace_steps > 0) trace_.start(TraceRecorder::Clock::now());
  const std::int64_t trace_until = global_step + config_.parallel.trace_steps;

  // Async / ssp parameter servers: no collectives among workers while training (one may be slow
  // or dead); worker 0 alone evaluates, on what the servers hold at that moment.
  const bool collective = !ticketed();
  const bool evaluates = collective || rank_ == 0;
  std::int64_t pending_ticket = -1;
  bool tickets_exhausted = false;
  const std::int64_t local_batch = ps_local_batch(config_, world_);
  const std::int64_t tickets_per_epoch = ps_tickets_per_epoch(config_, world_, n);
  // Evaluation; with tickets its time counts as training time of `seconds` too (the other workers
  // train on meanwhile, so leaving it out would flatter samples/s).
  auto evaluate_now = [&](double& seconds) {
    if (collective) return evaluate();
    Stopwatch clock;
    options_.ps->get({0, model_->store().num_params()}, model_->store().params());
    const Evaluation result = evaluate(/*alone=*/true);
    seconds += clock.seconds();
    train_seconds += clock.seconds();
    return result;
  };
  std::vector<double> step_seconds;  // every step's duration, for the median and p99
  data::ShuffledSampler sampler(n, seed);
  tensor::Tensor x;
  std::vector<std::int32_t> y;
  const std::int64_t batch = t.batch_size;
  for (std::int64_t epoch = start_epoch; epoch < t.epochs; ++epoch) {
    const std::vector<std::int64_t> order = sampler.epoch_order(epoch);
    progress.begin_epoch(epoch + 1, steps_per_epoch_);
    double epoch_loss_sum = 0.0;
    std::int64_t epoch_correct = 0;
    std::int64_t epoch_samples = 0;
    double epoch_seconds = 0.0;
    double window_loss = 0.0;
    std::int64_t window_steps = 0;
    std::int64_t window_samples = 0;
    double window_seconds = 0.0;
    RankTotals epoch_totals;
    const std::int64_t first = epoch == start_epoch ? start_position : 0;
    std::int64_t step_in_epoch = first / batch;
    std::int64_t pos = first;
    // This rank's next samples of the epoch's order, [begin, begin + size), the samples of the
    // whole step over all ranks (`batch`), and the batch its gradient is a share of (`scale_to`:
    // the gradient is scaled by size / scale_to); none at the end of the epoch.
    struct Share {
      std::int64_t begin = 0, size = 0, batch = 0, scale_to = 0;
    };
    auto next_share = [&]() -> std::optional<Share> {
      if (ticketed()) {
        // Tickets count over the whole run; one of the next epoch waits for the next epoch.
        if (pending_ticket < 0 && !tickets_exhausted) pending_ticket = options_.ps->next_ticket();
        if (pending_ticket < 0) {
          tickets_exhausted = true;
          return std::nullopt;
        }
        if (pending_ticket / tickets_per_epoch > epoch) return std::nullopt;
        const std::int64_t begin = (pending_ticket % tickets_per_epoch) * local_batch;
        pending_ticket = -1;
        const std::int64_t size = std::min(local_batch, n - begin);
        // A ticket's gradient is a 1/W share of a global batch (linear scaling to the worker's
        // batch): W pushes then move the parameters as far as one synchronous step, rather than W
        // times as far, which with the momentum asynchrony adds diverged at W = 6 (docs/PS.md).
        return Share{begin, size, size, local_batch * world_};
      }
      if (pos >= n || step_in_epoch >= steps_per_epoch_) return std::nullopt;
      const std::int64_t count = std::min(batch, n - pos);
      // The global batch [pos, pos + count) split over the ranks.
      const RankShare mine = rank_share(count, rank_, world_);
      const Share share{pos + mine.begin, mine.size, count, count};
      pos += batch;
      return share;
    };
    while (const std::optional<Share> next = next_share()) {
      const std::int64_t count = next->batch;
      const std::int64_t scale_to = next->scale_to;
      const std::int64_t share_begin = next->begin;
      const std::int64_t share = next->size;
      Stopwatch step_clock;
      const auto load_start = TraceRecorder::Clock::now();
      data::gather_batch(data_->train,
                         std::span(order).subspan(static_cast<std::size_t>(share_begin),
                                                  static_cast<std::size_t>(share)),
                         x, y);
      if (trace_.enabled()) {
        trace_.add("load batch", "data", TraceRecorder::kComputeThread, load_start,
                   TraceRecorder::Clock::now(), fmt::format(R"({{"step":{}}})", global_step));
      }
      std::int64_t correct = 0;
      const double lr = schedule_->lr(global_step);
      if (global_step >= trace_until) trace_.stop();
      const float value = train_step(x, y, global_step, &correct, scale_to);
      const double seconds = step_clock.seconds();
      step_seconds.push_back(seconds);
      ++global_step;
      ++step_in_epoch;
      epoch_totals.samples += static_cast<double>(share);
      epoch_totals.seconds += seconds;
      epoch_totals.waiting += last_step_.waiting;
      epoch_totals.comm += last_step_.comm;
      if (!std::isfinite(value)) {
        throw Error(fmt::format(
            "training diverged: the loss is {} at step {} (epoch {}); lower optim.lr (now {}) or "
            "check the data",
            value, global_step, epoch + 1, config_.optim.lr));
      }
      train_seconds += seconds;
      epoch_seconds += seconds;
      samples += count;
      epoch_samples += count;
      epoch_loss_sum += static_cast<double>(value) * static_cast<double>(share);
      epoch_correct += correct;
      window_loss += value;
      ++window_steps;
      window_samples += count;
      window_seconds += seconds;
      progress.step(step_in_epoch, value, window_samples / std::max(window_seconds, 1e-9));
      if (global_step % t.log_every == 0) {
        const StepRecord record{
            epoch + 1,
            global_step,
            window_loss / static_cast<double>(window_steps),
            lr,
            static_cast<double>(window_samples) / std::max(window_seconds, 1e-9),
            elapsed()};
        metrics.write(to_json(record));
        progress.log_step(record);
        window_loss = 0.0;
        window_steps = 0;
        window_samples = 0;
        window_seconds = 0.0;
      }
      if (t.eval_every_steps > 0 && global_step % t.eval_every_steps == 0 &&
          step_in_epoch < steps_per_epoch_ && evaluates) {
        last_eval = evaluate_now(epoch_seconds);
        targets.observe(last_eval.accuracy, train_seconds);
        best_accuracy = std::max(best_accuracy, last_eval.accuracy);
        metrics.write(to_json(EvalRecord{epoch + 1, global_step, last_eval.loss, last_eval.accuracy,
                                         train_seconds, elapsed()}));
      }
    }
    if (ticketed()) {
      // Every ticket of the epoch went to some worker: the epoch's samples, in this worker's time.
      samples += n - epoch_samples;
      epoch_samples = n;
    }
    if (evaluates) {
      last_eval = evaluate_now(epoch_seconds);
      targets.observe(last_eval.accuracy, train_seconds);
      best_accuracy = std::max(best_accuracy, last_eval.accuracy);
    }
    // The epoch's training loss and accuracy over every rank's shares (async / ssp: worker 0's).
    double epoch_sums[2] = {epoch_loss_sum, static_cast<double>(epoch_correct)};
    double epoch_seen = static_cast<double>(epoch_samples);
    if (comm != nullptr && collective) {
      comm->allreduce(epoch_sums, 2, DType::kF64, comm::ReduceOp::kSum);
    } else if (ticketed()) {
      epoch_seen = epoch_totals.samples;
    }
    last_train_loss = epoch_sums[0] / std::max(epoch_seen, 1.0);
    const EpochRecord record{epoch + 1,
                             global_step,
                             last_train_loss,
                             epoch_sums[1] / std::max(epoch_seen, 1.0),
                             last_eval.loss,
                             last_eval.accuracy,
                             static_cast<double>(epoch_samples) / std::max(epoch_seconds, 1e-9),
                             epoch_seconds,
                             train_seconds,
                             elapsed()};
    run_totals.samples += epoch_totals.samples;
    run_totals.seconds += epoch_totals.seconds;
    run_totals.waiting += epoch_totals.waiting;
    run_totals.comm += epoch_totals.comm;
    nlohmann::json epoch_json = to_json(record);
    if (comm != nullptr && collective) epoch_json["ranks"] = rank_rows(epoch_totals);
    metrics.write(epoch_json);
    progress.end_epoch(record);
    const bool last = epoch + 1 == t.epochs;
    // Parameter-server runs keep no checkpoints: the optimizer state lives on the servers.
    // With ZeRO-1 every rank takes part (the optimizer state is gathered); rank 0 writes.
    if ((writer || sharded()) && options_.ps == nullptr &&
        (last || (t.checkpoint_every > 0 && (epoch + 1) % t.checkpoint_every == 0))) {
      save(epoch + 1);
    }
  }
  if (config_.parallel.trace_steps > 0 && (collective || writer)) {
    write_trace(collective ? comm : nullptr, trace_, (dir / "trace.json").string());
  }
  std::vector<ps::ServerStats> server_stats;
  if (options_.ps != nullptr) {
    if (writer) {
      server_stats = options_.ps->stop_with_stats();  // once every worker has stopped
    } else {
      options_.ps->stop();
    }
  }

  RunSummary summary;
  summary.model = config_.model.name;
  summary.dataset = data_->train.name;
  summary.parameters = model_->store().num_params();
  summary.epochs = t.epochs;
  summary.steps = global_step;
  summary.samples = samples;
  summary.final_train_loss = last_train_loss;
  summary.final_test_loss = last_eval.loss;
  summary.final_test_accuracy = last_eval.accuracy;
  summary.best_test_accuracy = best_accuracy;
  summary.wall_seconds = elapsed();
  summary.train_seconds = train_seconds;
  summary.train_samples_per_second =
      train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
  summary.step_seconds_median = nearest_rank_quantile(step_seconds, 0.5);
  summary.step_seconds_p99 = nearest_rank_quantile(step_seconds, 0.99);
  summary.time_to_accuracy = targets.to_json();
  summary.seed = t.seed;
  summary.threads = t.threads;
  summary.resumed_from_epoch = resumed_from;
  if (options_.ps != nullptr) {
    summary.parallel = ps_summary(config_, world_, server_stats, dropped_steps_);
    // Worker 0's traffic to and from the servers, per step.
    const double steps = static_cast<double>(std::max<std::int64_t>(global_step - first_step, 1));
    summary.parallel["bytes_sent_per_rank_and_step"] =
        static_cast<double>(options_.ps->bytes_sent()) / steps;
    summary.parallel["bytes_received_per_rank_and_step"] =
        static_cast<double>(options_.ps->bytes_received()) / steps;
    if (collective) summary.parallel["per_rank"] = rank_rows(run_totals);
  } else if (comm != nullptr) {
    nlohmann::json ranks = rank_rows(run_totals);
    double compute = 0.0, comm_seconds = 0.0, waiting = 0.0, sent = 0.0, received = 0.0;
    for (const auto& row : ranks) {
      compute += row["compute_seconds"].get<double>();
      comm_seconds += row["comm_seconds"].get<double>();
      waiting += row["wait_seconds"].get<double>();
      sent += row["bytes_sent"].get<double>();
      received += row["bytes_received"].get<double>();
    }
    const double p = static_cast<double>(world_);
    summary.parallel = {
        {"ranks", world_},
        {"workers_per_process", config_.parallel.workers},
        {"processes", world_ / config_.parallel.workers},
        {"transport", std::string(comm->transport().name())},
        {"allreduce", config_.parallel.allreduce},
        {"fusion_bytes", fusion_.bytes},
        {"fusion_bytes_setting", config_.parallel.fusion_bytes},
        {"buckets", sync_->buckets().size()},
        {"overlap", overlap_.overlap},
        {"overlap_setting", config_.parallel.overlap},
        {"zero_stage", sharded() ? 1 : 0},
        {"zero_stage_setting", config_.parallel.zero_stage},
        {"fused_update", fused()},
        {"fused_update_setting", config_.parallel.fused_update},
        {"sync_batch_norm", config_.parallel.sync_batch_norm},
        {"mean_compute_seconds", compute / p},
        {"mean_comm_seconds", comm_seconds / p},
        {"mean_wait_seconds", waiting / p},
        {"bytes_sent", sent},
        {"bytes_received", received},
        {"bytes_sent_per_rank_and_step",
         global_step > first_step ? sent / static_cast<double>(global_step - first_step) / p : 0.0},
        {"per_rank", ranks}};
  }
  if (!writer) return summary;
  write_summary((dir / "summary.json").string(), summary);
  progress.message(fmt::format(
      "done: test accuracy {:.2f}% (best {:.2f}%), {:.1f} s of training at {:.0f} samples/s; "
      "summary in {}",
      100.0 * summary.final_test_accuracy, 100.0 * summary.best_test_accuracy,
      summary.train_seconds, summary.train_samples_per_second, (dir / "summary.json").string()));
  return summary;
}

}  // namespace dtrain::train
