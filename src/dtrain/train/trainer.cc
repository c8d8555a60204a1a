#include "dtrain/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <thread>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/base/timeline.h"
#include "dtrain/base/timer.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/nn/loss.h"
#include "dtrain/parallel/rank_agreement.h"
#include "dtrain/tensor/gemm.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/checkpoint_writer.h"
#include "dtrain/train/fault_injection.h"
#include "dtrain/train/fork_server.h"
#include "dtrain/train/memory_checkpoint.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/resume_records.h"
#include "dtrain/train/standby.h"
#include "dtrain/train/statistics.h"
#include "dtrain/train/strategy_registry.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kEvalBatch = 1000;
// Whether every rank of `comm` runs on the host of this one: the host names' hashes agree (one
// allreduce of 4 x 32 bits: max of each half and of its negation).
bool all_ranks_on_one_host(comm::Communicator& comm) {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  const std::uint64_t hash = std::hash<std::string_view>{}(name);
  const auto low = static_cast<std::int32_t>(hash & 0x7fffffffu);
  const auto high = static_cast<std::int32_t>((hash >> 32) & 0x7fffffffu);
  std::int32_t bounds[4] = {low, high, -low, -high};
  comm::CollectiveOptions options;
  options.check_header = false;  // every rank calls it at the same point of the start
  comm.allreduce(bounds, 4, DType::kI32, comm::ReduceOp::kMax, options);
  return bounds[0] == -bounds[2] && bounds[1] == -bounds[3];
}

// The seconds between checkpoints inside an epoch: train.checkpoint_every_seconds, or by the
// Young/Daly rule sqrt(2 C M) for a checkpoint cost of C seconds and a mean time between failures
// of M (Young 1974; Daly 2006's first-order term), or 0 (none).
double checkpoint_interval_seconds(const TrainSection& t, double cost_seconds) {
  if (t.checkpoint_every_seconds > 0.0) return t.checkpoint_every_seconds;
  if (t.mtbf_hours <= 0.0) return 0.0;
  return std::sqrt(2.0 * cost_seconds * t.mtbf_hours * 3600.0);
}

// The model's name in the banner and summary.json: model.name, or "custom" for a model built in
// code (TrainerOptions::make_model).
std::string model_label(const Config& config, const TrainerOptions& options) {
  return options.make_model ? std::string("custom") : config.model.name;
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
  // gpt (read by it alone): the context is the data's window (B, T), the vocabulary its classes.
  if (!sample_shape.empty()) spec.block = sample_shape[0];
  spec.vocab = classes;
  spec.d_model = config.gpt_dim;
  spec.heads = config.gpt_heads;
  spec.layers = config.gpt_layers;
  spec.init = config.init;
  spec.init_sigma = static_cast<float>(config.init_sigma);
  spec.layer_list = config.layers;
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
  out.freeze_step = config.freeze_step;
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
  if (options_.make_model) {
    // A model built in code: its factory says what it is; no ModelSpec describes it. (A launcher
    // that brings its own strategy, make_strategy, has checked the registry's entry already.)
    if (!options_.make_strategy)
      check_takes_model_factory(find_strategy(config_.parallel.strategy));
    model_ = options_.make_model(data_->train.sample_shape(), data_->train.num_classes);
    if (model_ == nullptr) {
      throw ConfigError(
          "TrainerOptions::make_model returned no model; return the nn::Model it built "
          "(docs/LIBRARY.md)");
    }
    if (model_->sample_shape() != data_->train.sample_shape()) {
      throw ShapeError(fmt::format(
          "TrainerOptions::make_model built a model for samples of shape {} but {} has samples "
          "of shape {}; construct the nn::Model with the sample_shape the factory is given",
          tensor::shape_str(model_->sample_shape()), data_->train.name,
          tensor::shape_str(data_->train.sample_shape())));
    }
    model_->build();  // checks that the layers fit each other; nothing when the factory built it
  } else {
    const nn::ModelSpec spec =
        model_spec(config_.model, data_->train.sample_shape(), data_->train.num_classes);
    // Refused before anything is allocated when this replica cannot fit (memory_budget.h: each
    // part's bytes and the bytes available); a big model is announced, building it takes a while.
    const auto need = check_memory_budget(
        config_, spec, 1, options_.comm != nullptr ? options_.comm->size() : 1,
        run_data_bytes(*data_),
        /*writes_checkpoints=*/options_.comm == nullptr || options_.comm->rank() == 0);
    if (!options_.quiet && (options_.comm == nullptr || options_.comm->rank() == 0)) {
      announce_model_build(options_.out, need);
    }
    model_ = nn::build_model(spec);
  }
  model_->init(static_cast<std::uint64_t>(config_.train.seed));
  if (options_.comm != nullptr) {
    comm::Communicator& comm = *options_.comm;
    rank_ = comm.rank();
    world_ = comm.size();
    parallel::check_same_on_all_ranks(comm, to_toml(config_), "the configuration");
    parallel::check_same_on_all_ranks(comm, parallel::parameter_layout(model_->store()),
                                      "the model's parameter layout");
  }
  local_ = std::make_unique<LocalGradients>(config_, *model_, rank_, world_, trace_);
  const StrategyContext context{config_, *model_, options_.comm, rank_, world_, trace_, *local_};
  if (options_.make_strategy) {
    strategy_ = options_.make_strategy(context);
  } else {
    const StrategyInfo& info = find_strategy(config_.parallel.strategy);
    if (!info.make) {
      throw InternalError(
          fmt::format("parallel.strategy = \"{}\" does not run one Trainer per rank; start it with "
                      "run_training (launch.h)",
                      info.name));
    }
    strategy_ = info.make(context);
  }
  optimizer_ =
      optim::make_optimizer(optimizer_config(config_.optim), strategy_->optimizer_segments());
  plan_ = strategy_->share_plan(data_->train.size());
  schedule_ =
      std::make_unique<optim::LrSchedule>(schedule_config(config_, plan_->steps_per_epoch()));
  check_straggler_rank(config_.parallel.straggler, world_);
}

Trainer::~Trainer() = default;

float Trainer::train_step(const tensor::Tensor& x, std::span<const std::int32_t> labels,
                          std::int64_t step, std::int64_t* correct, std::int64_t global_count) {
  if (global_count == 0) global_count = x.dim(0) * world_;
  last_step_ =
      strategy_->step(StepInput{x, labels, step, global_count, schedule_->lr(step)}, *optimizer_);
  if (correct != nullptr) *correct = last_step_.correct;
  return last_step_.loss;
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
  // Text windows predict a byte per position: kEvalBatch positions' logits at a time.
  const std::int64_t per_sample = test.labels_per_sample;
  const std::int64_t batch = std::max<std::int64_t>(1, kEvalBatch / per_sample);
  for (std::int64_t begin = 0; begin < mine; begin += batch) {
    const std::int64_t count = std::min(batch, mine - begin);
    data::gather_batch(test,
                       std::span(indices).subspan(static_cast<std::size_t>(begin),
                                                  static_cast<std::size_t>(count)),
                       x, y);
    const tensor::Tensor& logits = model_->forward(
        x, nn::ForwardContext{nn::Mode::kEval, static_cast<std::uint64_t>(config_.train.seed), 0});
    loss_sum += static_cast<double>(local_->loss(logits, y, nullptr)) * static_cast<double>(count);
    correct += nn::count_correct(logits, y);
  }
  double sums[2] = {loss_sum, static_cast<double>(correct)};
  if (options_.comm != nullptr && !alone) {
    options_.comm->allreduce(sums, 2, DType::kF64, comm::ReduceOp::kSum);
  }
  result.loss = sums[0] / static_cast<double>(n);
  result.accuracy = sums[1] / static_cast<double>(n * per_sample);
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

void Trainer::warm_up_as_standby() {
  if (!strategy_->forward_backward_is_local() || data_->train.size() == 0) return;
  const std::int64_t batch = config_.train.batch_size;
  const std::int64_t share =
      std::min(std::max<std::int64_t>(1, batch / world_), data_->train.size());
  std::vector<std::int64_t> indices(static_cast<std::size_t>(share));
  std::iota(indices.begin(), indices.end(), std::int64_t{0});
  tensor::Tensor x;
  std::vector<std::int32_t> y;
  data::gather_batch(data_->train, indices, x, y);
  nn::ParamStore& store = model_->store();
  const std::vector<float> buffers(store.buffers(), store.buffers() + store.num_buffer_elements());
  local_->compute(x, y, 0, static_cast<double>(batch));
  std::copy(buffers.begin(), buffers.end(), store.buffers());
  store.zero_grads();
}

void Trainer::serve_as_fork_template() {
  // Ranks that are threads are served by run_training (launch.cc), which runs them once for the
  // warm-up and forks where none runs; a rank thread never forks.
  if (options_.comm != nullptr) {
    refuse_fork_template("a rank that is a thread cannot fork its process");
  }
  // The warm-up's activations, and every tensor of at least 64 KiB allocated from here on, in
  // memory the template shares with the workers it forks; the parameters, gradients, optimizer
  // state and data were allocated before, in private memory.
  install_fork_scratch();
  warm_up_as_standby();
  serve_forks_after_warm_up();  // returns in a woken worker, its compute pool started again
}

RunSummary Trainer::run() {
  // A warm standby sleeps here, built, loaded and warmed up, until the supervisor needs it
  // (standby.h).
  if (is_standby()) warm_up_as_standby();
  wait_until_activated();
  // A fork server's template (fork_server.h) stops here for good; its workers go on from here.
  if (is_fork_template()) serve_as_fork_template();
  timeline_mark("trainer ready");
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
  // What a checkpoint inside an epoch carries of the epoch's sums (the epoch record then covers
  // the whole epoch): the loss and accuracy sums over every rank (rank 0 holds them after a
  // resume), the samples and seconds so far.
  struct EpochCarry {
    double loss_sum = 0.0;
    double correct = 0.0;
    std::int64_t samples = 0;
    double seconds = 0.0;
  } carry;
  int resharded_from = 0;  // the ranks that wrote the checkpoint, when not this run's
  // A run stopped before its first checkpoint has none: --resume then starts it from the
  // beginning (its resolved.toml says how) instead of refusing; a fresh run into the folder is
  // refused (it holds metrics.jsonl), so the two messages would otherwise send the user in a
  // circle.
  // Tier 1: checkpoints in shared memory (memory_checkpoint.h). Every rank reads it on a resume,
  // so it is used only when every rank runs on rank 0's host.
  std::optional<MemoryCheckpoint> memory;
  if (t.memory_checkpoint_every_steps > 0) {
    memory.emplace(dir.string(), t.memory_checkpoint_folder);
    if (comm != nullptr && world_ > 1 && !all_ranks_on_one_host(*comm)) {
      memory.reset();
      if (writer) {
        log::warn(
            "train.memory_checkpoint_every_steps is ignored: the ranks run on more than one host, "
            "and a memory checkpoint lives on one (docs/FAULTS.md); checkpoints/ is used alone");
      }
    }
  }
  MemoryCheckpoint* const memory_tier = memory ? &*memory : nullptr;
  bool resume = options_.resume;
  if (resume && !has_any_checkpoint(checkpoints, memory_tier)) {
    resume = false;
    if (writer) {
      log::info(
          "{} holds no checkpoint yet (the run stopped before its first): training it from "
          "the beginning",
          (dir / "checkpoints").string());
      drop_records_after((dir / "metrics.jsonl").string(), 0, 0);
    }
  }
  // A fresh run never resumes from a memory file an earlier run of the same folder left (killed
  // before it could delete it): gone before this run's first save.
  if (!resume && writer && memory_tier != nullptr) memory_tier->remove();
  if (resume) {
    const auto [path, checkpoint] = newest_checkpoint(checkpoints, memory_tier);
    if (checkpoint.seed != seed) {
      throw CheckpointError(fmt::format(
          "checkpoint {} was written with train.seed = {} but the run's resolved.toml says {}",
          path, checkpoint.seed, seed));
    }
    restore_into(checkpoint, model_->store(), path);
    std::vector<optim::StateTensor> state;
    for (const auto& named : checkpoint.optimizer_state)
      state.push_back({named.name, named.values});
    strategy_->restore_state(std::move(state), checkpoint.optimizer_steps, *optimizer_, path);
    timeline_mark(fmt::format("checkpoint loaded (step {})", checkpoint.global_step));
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
    restore_accuracy_targets(checkpoint, targets);
    // A checkpoint past the end as configured (a stopped run resumed with fewer --epochs than it
    // has done) is refused before anything is rewritten: training nothing and writing a summary
    // of fewer epochs would misreport the run.
    if (start_epoch > t.epochs || (start_epoch == t.epochs && start_position > 0)) {
      throw ConfigError(fmt::format(
          "--resume {}: the newest checkpoint {} is past --epochs {} ({} epoch{} done{}); give "
          "--epochs {} or more to continue it",
          dir.string(), path, t.epochs, start_epoch, start_epoch == 1 ? "" : "s",
          start_position > 0
              ? fmt::format(", then step {} inside epoch {}", global_step, start_epoch + 1)
              : std::string(),
          start_epoch + 1));
    }
    // A run stopped after its last checkpoint (exactly its end) but before summary.json (killed,
    // or a full disk) is complete: it writes its summary from the checkpoint's figures and trains
    // nothing.
    const bool summary_missing = !fs::exists(dir / "summary.json");
    if (start_epoch == t.epochs && summary_missing && writer) {
      log::info(
          "{} is the run's last checkpoint and summary.json is missing: writing the summary "
          "from it",
          path);
    }
    if (start_epoch == t.epochs && !summary_missing) {
      throw ConfigError(fmt::format(
          "checkpoint {} is at epoch {} and train.epochs = {}: nothing left to train; pass "
          "--epochs N with N > {} to train further",
          path, checkpoint.epoch, t.epochs, checkpoint.epoch));
    }
    // Written by another number of ranks (--workers or mpirun -np changed): one rule for both.
    // The strategy either re-cuts its state (one worker's layout in the file) or refuses.
    const auto written_by =
        static_cast<int>(checkpoint.scalar("world_size", static_cast<double>(world_)));
    if (written_by != world_) {
      if (!strategy_->reshards_checkpoints()) {
        throw CheckpointError(fmt::format(
            "checkpoint {} was written by {} ranks and this run has {}; {} keeps state per rank "
            "that cannot be re-cut: resume with {} ranks (--workers, or mpirun -np)",
            path, written_by, world_, strategy_->name(), written_by));
      }
      resharded_from = written_by;
    }
    if (start_position > 0) {
      carry.samples = static_cast<std::int64_t>(checkpoint.scalar("epoch_samples", 0.0));
      carry.seconds = checkpoint.scalar("epoch_seconds", 0.0);
      if (writer) {
        carry.loss_sum = checkpoint.scalar("epoch_loss_sum", 0.0);
        carry.correct = checkpoint.scalar("epoch_correct", 0.0);
      }
    }
    if (writer) {
      drop_records_after((dir / "metrics.jsonl").string(), checkpoint.epoch,
                         checkpoint.global_step);
    }
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
      model_label(config_, options_), model_->store().num_params(), data_->train.name, n,
      data_->test.size(), t.epochs, plan_->steps_per_epoch(), dir.string()));
  for (const std::string& line : strategy_->describe()) progress.message(line);
  if (resume) {
    progress.message(fmt::format("resuming at epoch {} (step {}{})", start_epoch + 1, global_step,
                                 start_position > 0
                                     ? fmt::format(", sample {} of the epoch", start_position)
                                     : std::string()));
  }
  if (resharded_from > 0) {
    progress.message(fmt::format(
        "resharded: the checkpoint was written by {} ranks, this run has {}; parameters, "
        "optimizer state, sampler position and learning-rate schedule carry over, the global "
        "batch stays {} (docs/FAULTS.md)",
        resharded_from, world_, t.batch_size));
  }

  auto elapsed = [&] { return previous_wall + wall.seconds(); };
  // Checkpoints are written by a thread of rank 0 from an in-memory snapshot (checkpoint_writer.h);
  // the run stalls for the snapshot only. `snapshot_seconds` + the write's seconds are the cost C
  // of the Young/Daly interval.
  std::optional<CheckpointWriter> background;
  if (writer) background.emplace(checkpoints);
  double snapshot_seconds = 0.0;
  // `epochs_done` complete epochs and `position` samples of the next (0: at an epoch boundary,
  // `epoch_sums` then unused); `fatal`: a failed write ends the run (its last checkpoint) instead
  // of a warning; `to_memory`: into the memory tier, on this thread, instead of checkpoints/.
  auto save = [&](std::int64_t epochs_done, std::int64_t position, const EpochCarry& epoch_sums,
                  bool fatal, bool to_memory = false) {
    Stopwatch clock;
    Checkpoint c;
    c.epoch = epochs_done;
    c.global_step = global_step;
    c.optimizer_steps = optimizer_->steps();
    c.seed = seed;
    c.sampler_epoch = epochs_done;
    c.sampler_position = position;
    c.scalars = {{"samples", static_cast<double>(samples)},
                 {"train_seconds", train_seconds},
                 {"wall_seconds", elapsed()},
                 {"best_test_accuracy", best_accuracy},
                 {"final_test_loss", last_eval.loss},
                 {"final_test_accuracy", last_eval.accuracy},
                 {"final_train_loss", last_train_loss},
                 {"world_size", static_cast<double>(world_)}};
    if (position > 0) {
      // The epoch's loss and accuracy sums over every rank, so that its record stays whole.
      double sums[2] = {epoch_sums.loss_sum, epoch_sums.correct};
      if (comm != nullptr && strategy_->collective()) {
        comm->allreduce(sums, 2, DType::kF64, comm::ReduceOp::kSum);
      }
      c.scalars.push_back({"epoch_loss_sum", sums[0]});
      c.scalars.push_back({"epoch_correct", sums[1]});
      c.scalars.push_back({"epoch_samples", static_cast<double>(epoch_sums.samples)});
      c.scalars.push_back({"epoch_seconds", epoch_sums.seconds});
    }
    save_accuracy_targets(targets, c);
    // Every rank: the strategy's state may be collective (ZeRO-1 gathers its shards).
    for (auto& state : strategy_->checkpoint_state(*optimizer_)) {
      c.optimizer_state.push_back({std::move(state.name), std::move(state.values)});
    }
    if (!writer) return;
    capture_from(model_->store(), c);
    if (to_memory) {
      try {
        memory->save(c);
      } catch (const CheckpointError& e) {
        log::warn("{}; memory checkpoints are off for this run", e.what());
      }
      return;
    }
    snapshot_seconds = clock.seconds();
    background->submit(std::move(c), fatal);
  };
  // Checkpoints inside an epoch: every checkpoint_every_steps steps (the same step on every rank)
  // and every checkpoint_every_seconds of rank 0's clock, or at the Young/Daly interval; and a
  // stop asked for by SIGTERM / SIGINT. The ranks agree on the clock and the signal in one 8-byte
  // allreduce per step (about a microsecond between threads, docs/FAULTS.md), so that every rank
  // checkpoints and stops after the same step.
  // A strategy whose ranks never meet (asynchronous parameter servers) takes them on rank 0 alone,
  // by its own step count and clock; its position comes from the share plan (the tickets handed
  // out). The other ranks stop on a signal without one.
  const bool mid_epoch = strategy_->keeps_checkpoints() && strategy_->checkpoints_mid_epoch() &&
                         (comm == nullptr || strategy_->collective() || writer);
  const bool agree = comm != nullptr && strategy_->collective();
  // A memory checkpoint is due by the step count alone, so every rank takes part in the same ones.
  auto memory_due = [&] {
    return memory_tier != nullptr && global_step % t.memory_checkpoint_every_steps == 0;
  };
  if (memory_tier != nullptr) {
    progress.message(
        mid_epoch
            ? fmt::format("memory checkpoints every {} steps in {} (tier 1: two slots the size "
                          "of a checkpoint; they outlive the process, not the machine)",
                          t.memory_checkpoint_every_steps, memory_tier->path())
            : fmt::format("memory checkpoints ({} steps) are not taken: {} checkpoints at epoch "
                          "ends only (docs/FAULTS.md)",
                          t.memory_checkpoint_every_steps, strategy_->name()));
  }
  // The cost C of a checkpoint before one was measured: its bytes at 500 MB/s.
  const double first_cost =
      1e-3 + static_cast<double>(model_->store().num_params()) * 4.0 * 3.0 / 500e6;
  Stopwatch since_checkpoint;
  const bool on_a_clock = t.checkpoint_every_seconds > 0.0 || t.mtbf_hours > 0.0;
  auto interval_seconds = [&] {
    if (!on_a_clock) return 0.0;  // no lock on the writer per step when no clock is set
    const auto written = background ? background->last_write() : std::nullopt;
    return checkpoint_interval_seconds(t,
                                       written ? snapshot_seconds + written->second : first_cost);
  };
  if (on_a_clock || t.checkpoint_every_steps > 0) {
    // The rule beside its figure: Young/Daly's interval from the estimated cost C.
    std::string rules;
    if (t.checkpoint_every_steps > 0)
      rules = fmt::format("every {} steps", t.checkpoint_every_steps);
    if (t.checkpoint_every_seconds > 0.0) {
      rules +=
          fmt::format("{}every {:g} s", rules.empty() ? "" : " and ", t.checkpoint_every_seconds);
    } else if (t.mtbf_hours > 0.0) {
      rules += fmt::format(
          "{}every sqrt(2 C MTBF) = sqrt(2 x {:.3g} s x {:.4g} s) = {:.3g} s (Young/Daly; C, a "
          "checkpoint's cost, estimated from its bytes, then measured at each one)",
          rules.empty() ? "" : " and ", first_cost, t.mtbf_hours * 3600.0,
          checkpoint_interval_seconds(t, first_cost));
    }
    progress.message(mid_epoch ? fmt::format("checkpoints inside epochs: {}, written in the "
                                             "background",
                                             rules)
                               : fmt::format("checkpoints inside epochs ({}) are not taken: {} "
                                             "checkpoints at epoch ends only (docs/FAULTS.md)",
                                             rules, strategy_->name()));
  }
  // {the signal that asks for a stop, whether a clock checkpoint is due}: the same on every rank.
  auto control = [&]() -> std::pair<int, bool> {
    const double interval = writer ? interval_seconds() : 0.0;
    std::int32_t flags[2] = {
        stop_requested(),
        writer && interval > 0.0 && since_checkpoint.seconds() >= interval ? 1 : 0};
    if (agree) {
      comm::CollectiveOptions options;
      options.check_header = false;  // every rank calls it after the same step
      comm->allreduce(flags, 2, DType::kI32, comm::ReduceOp::kMax, options);
    }
    return {flags[0], flags[1] != 0};
  };
  int stopped_by = 0;
  // Checkpoints due (steps, clock; memory tier) while the strategy could not take them.
  bool checkpoint_pending = false;
  bool memory_pending = false;
  bool saved_at_stop = false;  // whether the stop wrote a checkpoint
  const FaultSpec fault = parse_fault(config_.parallel.inject_fault);
  // Under mpirun with one rank per process, a failing rank is a dying process.
  const bool process_rank = comm::launched_by_mpirun() && config_.parallel.workers == 1;

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

  // A strategy whose ranks never wait for each other (async parameter servers) has no collectives
  // outside its steps: rank 0 alone evaluates, and the epoch's figures are its own.
  const bool collective = strategy_->collective();
  const bool evaluates = collective || rank_ == 0;
  // Evaluation; alone, its time counts as training time of `seconds` too (the other ranks train on
  // meanwhile, so leaving it out would flatter samples/s).
  auto evaluate_now = [&](double& seconds) {
    if (collective) {
      strategy_->before_evaluation();
      const Evaluation result = evaluate();
      strategy_->after_evaluation();
      return result;
    }
    Stopwatch clock;
    strategy_->before_evaluation();
    const Evaluation result = evaluate(/*alone=*/true);
    strategy_->after_evaluation();
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
    progress.begin_epoch(epoch + 1, plan_->steps_per_epoch());
    // A resume inside this epoch starts from the sums its checkpoint carried.
    const EpochCarry from = epoch == start_epoch ? carry : EpochCarry{};
    double epoch_loss_sum = from.loss_sum;
    auto epoch_correct = static_cast<std::int64_t>(from.correct);
    std::int64_t epoch_samples = from.samples;
    double epoch_seconds = from.seconds;
    double window_loss = 0.0;
    std::int64_t window_steps = 0;
    std::int64_t window_samples = 0;
    double window_seconds = 0.0;
    RankTotals epoch_totals;
    const std::int64_t first = epoch == start_epoch ? start_position : 0;
    std::int64_t step_in_epoch = first / batch;
    plan_->begin_epoch(epoch, first);
    while (const std::optional<data::Share> next = plan_->next()) {
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
      // Where a restart's time goes (docs/FAULTS.md): each step's end, with DTRAIN_TIMELINE.
      if (timeline_enabled()) {
        timeline_mark(fmt::format("step {} done ({:.3f} s)", global_step, seconds));
      }
      inject_fault(fault, rank_, global_step, process_rank, dir.string());
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
          step_in_epoch < plan_->steps_per_epoch() && evaluates) {
        last_eval = evaluate_now(epoch_seconds);
        targets.observe(last_eval.accuracy, train_seconds);
        best_accuracy = std::max(best_accuracy, last_eval.accuracy);
        metrics.write(to_json(EvalRecord{epoch + 1, global_step, last_eval.loss, last_eval.accuracy,
                                         train_seconds, elapsed()}));
      }
      if (step_in_epoch < plan_->steps_per_epoch()) {  // the epoch's end decides on its own below
        const bool step_due =
            t.checkpoint_every_steps > 0 && global_step % t.checkpoint_every_steps == 0;
        const auto [signal, time_due] = control();
        const EpochCarry so_far{epoch_loss_sum, static_cast<double>(epoch_correct), epoch_samples,
                                epoch_seconds};
        // A checkpoint or a stop that falls between two of the strategy's checkpointable steps
        // (local SGD between averages) waits for the next one; the epoch's end is one.
        const bool boundary = strategy_->can_checkpoint_now();
        checkpoint_pending = mid_epoch && (checkpoint_pending || step_due || time_due);
        memory_pending = mid_epoch && (memory_pending || memory_due());
        if (mid_epoch && boundary && (signal != 0 || checkpoint_pending)) {
          save(epoch, plan_->checkpoint_position(step_in_epoch * batch), so_far,
               /*fatal=*/signal != 0);
          since_checkpoint.reset();
          checkpoint_pending = memory_pending = false;
          saved_at_stop = signal != 0;
        } else if (mid_epoch && boundary && memory_pending) {
          save(epoch, plan_->checkpoint_position(step_in_epoch * batch), so_far, /*fatal=*/false,
               /*to_memory=*/true);
          memory_pending = false;
        }
        if (signal != 0 && (boundary || !mid_epoch)) {
          stopped_by = signal;
          break;
        }
      }
    }
    if (stopped_by != 0) break;  // the rest of the epoch is for the run that resumes it
    {
      Stopwatch clock;  // local SGD's last average of the epoch: training time
      const double communicating = strategy_->end_epoch();
      const double seconds = clock.seconds();
      epoch_seconds += seconds;
      train_seconds += seconds;
      epoch_totals.seconds += seconds;
      epoch_totals.comm += communicating;
      epoch_totals.waiting += communicating;
    }
    if (plan_->independent()) {
      // Every share of the epoch went to some rank: the epoch's samples, in this rank's time.
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
    const auto labels_per_sample = static_cast<double>(data_->train.labels_per_sample);
    double epoch_seen = static_cast<double>(epoch_samples);
    if (comm != nullptr && collective) {
      comm->allreduce(epoch_sums, 2, DType::kF64, comm::ReduceOp::kSum);
    } else if (plan_->independent()) {
      epoch_seen = epoch_totals.samples;
    }
    last_train_loss = epoch_sums[0] / std::max(epoch_seen, 1.0);
    const EpochRecord record{epoch + 1,
                             global_step,
                             last_train_loss,
                             epoch_sums[1] / std::max(epoch_seen * labels_per_sample, 1.0),
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
    const auto [signal, time_due] = last ? std::pair<int, bool>{0, false} : control();
    // A step or clock checkpoint that falls on the epoch's last step is this epoch checkpoint.
    const bool step_due =
        t.checkpoint_every_steps > 0 && global_step % t.checkpoint_every_steps == 0;
    // Every rank takes part (the strategy's state may be gathered); rank 0 writes.
    if (strategy_->keeps_checkpoints() &&
        (last || signal != 0 || step_due || time_due || checkpoint_pending ||
         (t.checkpoint_every > 0 && (epoch + 1) % t.checkpoint_every == 0))) {
      save(epoch + 1, 0, EpochCarry{}, /*fatal=*/last || signal != 0);
      since_checkpoint.reset();
      checkpoint_pending = memory_pending = false;
      saved_at_stop = signal != 0;
    } else if (mid_epoch && (memory_pending || memory_due())) {
      save(epoch + 1, 0, EpochCarry{}, /*fatal=*/false, /*to_memory=*/true);
      memory_pending = false;
    }
    if (signal != 0) stopped_by = signal;
    if (stopped_by != 0) break;
  }
  if (config_.parallel.trace_steps > 0 && (collective || writer) && global_step > first_step) {
    write_trace(collective ? comm : nullptr, trace_, (dir / "trace.json").string());
  }
  strategy_->finish(writer);

  RunSummary summary;
  summary.model = model_label(config_, options_);
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
  summary.parallel = strategy_->summary(
      RunTotalsView{global_step - first_step, [&] { return rank_rows(run_totals); }});
  summary.stopped_by_signal = stopped_by;
  if (!writer) return summary;
  background->wait();  // the last checkpoint is on disk before the run reports anything
  // A finished run, or a stop whose checkpoint is newer, leaves nothing in memory for a restart.
  if (memory_tier != nullptr && (stopped_by == 0 || saved_at_stop)) memory_tier->remove();
  if (stopped_by != 0) {
    const auto written = background->last_write();
    // Printed even with --quiet: the run is incomplete, and this says how to finish it.
    log::warn(
        "{}",
        fmt::format(
            "stopped by {} after step {} of {}: {}; continue with `dtrain train --resume {}`",
            stop_signal_name(stopped_by), global_step, t.epochs * plan_->steps_per_epoch(),
            saved_at_stop && written
                ? fmt::format("checkpoint {} ({:.2f} s to write)", written->first, written->second)
            : written ? fmt::format("{} checkpoints at epoch ends only, so the steps since {} "
                                    "are lost",
                                    strategy_->name(), written->first)
                      : fmt::format("{} keeps no checkpoint inside an epoch, and none was written "
                                    "yet",
                                    strategy_->name()),
            dir.string()));
    return summary;
  }
  write_summary((dir / "summary.json").string(), summary);
  progress.message(fmt::format(
      "done: test accuracy {:.2f}% (best {:.2f}%), {:.1f} s of training at {:.0f} samples/s; "
      "summary in {}",
      100.0 * summary.final_test_accuracy, 100.0 * summary.best_test_accuracy,
      summary.train_seconds, summary.train_samples_per_second, (dir / "summary.json").string()));
  return summary;
}

}  // namespace dtrain::train
