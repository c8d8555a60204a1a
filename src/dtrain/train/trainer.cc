#include "dtrain/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/base/timer.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/nn/loss.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/progress.h"

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
  set_compute_threads(static_cast<int>(config_.train.threads));
  data_ = load_run_data(config_.data);
  if (data_.train.size() == 0) {
    throw DataError(fmt::format("the training set of {} in {} is empty", config_.data.dataset,
                                config_.data.path));
  }
  model_ = nn::build_model(
      model_spec(config_.model, data_.train.sample_shape(), data_.train.num_classes));
  model_->init(static_cast<std::uint64_t>(config_.train.seed));
  std::vector<optim::Segment> segments;
  for (const auto& entry : model_->store().param_entries()) {
    segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
  }
  optimizer_ = optim::make_optimizer(optimizer_config(config_.optim), std::move(segments));
  const std::int64_t batch = config_.train.batch_size;
  steps_per_epoch_ = (data_.train.size() + batch - 1) / batch;
  schedule_ = std::make_unique<optim::LrSchedule>(schedule_config(config_, steps_per_epoch_));
}

Trainer::~Trainer() = default;

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
                          std::int64_t step, std::int64_t* correct) {
  nn::ParamStore& store = model_->store();
  store.zero_grads();
  const tensor::Tensor& logits = model_->forward(
      x,
      nn::ForwardContext{nn::Mode::kTrain, static_cast<std::uint64_t>(config_.train.seed), step});
  const float value = compute_loss(logits, labels, &dlogits_);
  if (correct != nullptr) *correct = nn::count_correct(logits, labels);
  model_->backward(dlogits_);
  // (A data-parallel run averages store.grads() across workers here.)
  optimizer_->step(store.params(), store.grads(), schedule_->lr(step));
  return value;
}

Trainer::Evaluation Trainer::evaluate() {
  const data::Dataset& test = data_.test;
  const std::int64_t n = test.size();
  Evaluation result;
  if (n == 0) return result;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
  std::iota(indices.begin(), indices.end(), 0);
  tensor::Tensor x;
  std::vector<std::int32_t> y;
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t begin = 0; begin < n; begin += kEvalBatch) {
    const std::int64_t count = std::min(kEvalBatch, n - begin);
    data::gather_batch(test,
                       std::span(indices).subspan(static_cast<std::size_t>(begin),
                                                  static_cast<std::size_t>(count)),
                       x, y);
    const tensor::Tensor& logits = model_->forward(
        x, nn::ForwardContext{nn::Mode::kEval, static_cast<std::uint64_t>(config_.train.seed), 0});
    loss_sum += static_cast<double>(compute_loss(logits, y, nullptr)) * static_cast<double>(count);
    correct += nn::count_correct(logits, y);
  }
  result.loss = loss_sum / static_cast<double>(n);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(n);
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
  write_file_atomically((dir / "resolved.toml").string(), to_toml(config_));
}

RunSummary Trainer::run() {
  Stopwatch wall;
  const TrainSection& t = config_.train;
  const fs::path dir(options_.run_dir);
  prepare_run_dir();
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
    for (const auto& named : checkpoint.optimizer_state)
      state.push_back({named.name, named.values});
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
    drop_records_after((dir / "metrics.jsonl").string(), checkpoint.epoch);
  }
  const std::int64_t resumed_from = start_epoch;

  MetricsLog metrics((dir / "metrics.jsonl").string(), options_.resume);
  Progress progress(options_.out, Progress::detect_style(options_.out, options_.quiet), t.epochs);
  const std::int64_t n = data_.train.size();
  progress.message(fmt::format(
      "dtrain: {} ({} parameters) on {} ({} train / {} test samples), {} epochs of {} steps; "
      "run folder {}",
      config_.model.name, model_->store().num_params(), data_.train.name, n, data_.test.size(),
      t.epochs, steps_per_epoch_, dir.string()));
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
    for (auto& state : optimizer_->state()) {
      c.optimizer_state.push_back({std::move(state.name), std::move(state.values)});
    }
    checkpoints.save(c, epochs_done);
  };

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
    const std::int64_t first = epoch == start_epoch ? start_position : 0;
    for (std::int64_t pos = first; pos < n; pos += batch) {
      const std::int64_t count = std::min(batch, n - pos);
      Stopwatch step_clock;
      data::gather_batch(
          data_.train,
          std::span(order).subspan(static_cast<std::size_t>(pos), static_cast<std::size_t>(count)),
          x, y);
      std::int64_t correct = 0;
      const double lr = schedule_->lr(global_step);
      const float value = train_step(x, y, global_step, &correct);
      const double seconds = step_clock.seconds();
      ++global_step;
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
      epoch_loss_sum += static_cast<double>(value) * static_cast<double>(count);
      epoch_correct += correct;
      window_loss += value;
      ++window_steps;
      window_samples += count;
      window_seconds += seconds;
      const std::int64_t step_in_epoch = (pos + count + batch - 1) / batch;
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
      if (t.eval_every_steps > 0 && global_step % t.eval_every_steps == 0 && pos + count < n) {
        last_eval = evaluate();
        targets.observe(last_eval.accuracy, train_seconds);
        best_accuracy = std::max(best_accuracy, last_eval.accuracy);
        metrics.write(to_json(EvalRecord{epoch + 1, global_step, last_eval.loss, last_eval.accuracy,
                                         train_seconds, elapsed()}));
      }
    }
    last_eval = evaluate();
    targets.observe(last_eval.accuracy, train_seconds);
    best_accuracy = std::max(best_accuracy, last_eval.accuracy);
    last_train_loss =
        epoch_loss_sum / static_cast<double>(std::max<std::int64_t>(epoch_samples, 1));
    const EpochRecord record{epoch + 1,
                             global_step,
                             last_train_loss,
                             static_cast<double>(epoch_correct) /
                                 static_cast<double>(std::max<std::int64_t>(epoch_samples, 1)),
                             last_eval.loss,
                             last_eval.accuracy,
                             static_cast<double>(epoch_samples) / std::max(epoch_seconds, 1e-9),
                             epoch_seconds,
                             train_seconds,
                             elapsed()};
    metrics.write(to_json(record));
    progress.end_epoch(record);
    const bool last = epoch + 1 == t.epochs;
    if (last || (t.checkpoint_every > 0 && (epoch + 1) % t.checkpoint_every == 0)) save(epoch + 1);
  }

  RunSummary summary;
  summary.model = config_.model.name;
  summary.dataset = data_.train.name;
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
  summary.time_to_accuracy = targets.to_json();
  summary.seed = t.seed;
  summary.threads = t.threads;
  summary.resumed_from_epoch = resumed_from;
  write_summary((dir / "summary.json").string(), summary);
  progress.message(fmt::format(
      "done: test accuracy {:.2f}% (best {:.2f}%), {:.1f} s of training at {:.0f} samples/s; "
      "summary in {}",
      100.0 * summary.final_test_accuracy, 100.0 * summary.best_test_accuracy,
      summary.train_seconds, summary.train_samples_per_second, (dir / "summary.json").string()));
  return summary;
}

}  // namespace dtrain::train
