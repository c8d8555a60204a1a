#include "dtrain/train/hogwild_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/timer.h"
#include "dtrain/data/libsvm_reader.h"
#include "dtrain/data/sparse_dataset.h"
#include "dtrain/data/sparse_synthetic.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/parallel/hogwild.h"
#include "dtrain/parallel/hogwild_dense.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/run_data.h"
#include "dtrain/train/statistics.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

struct SparseRunData {
  data::SparseDataset train;
  std::optional<data::SparseDataset> test;
};

SparseRunData load_sparse_data(const DataSection& d) {
  SparseRunData out;
  if (d.dataset == "libsvm") {
    out.train = data::read_libsvm(d.path);
    if (!d.test_path.empty()) {
      out.test = data::read_libsvm(d.test_path, out.train.num_features);
      // The test set first: its labels map by the training set's values as read.
      data::make_binary_labels(*out.test, out.train);
    }
    data::make_binary_labels(out.train);
  } else {
    data::SparseSyntheticConfig config;
    config.samples = d.synthetic_samples;
    config.features = d.sparse_features;
    config.nonzeros = d.sparse_nonzeros;
    config.label_noise = d.sparse_label_noise;
    config.seed = static_cast<std::uint64_t>(d.synthetic_seed);
    out.train = data::make_sparse_synthetic(config);
    config.samples = d.synthetic_test_samples;
    out.test = data::make_sparse_synthetic(config, d.synthetic_samples);  // the samples after
  }
  out.train = data::take_first_rows(out.train, d.limit_train);
  if (out.test) out.test = data::take_first_rows(*out.test, d.limit_test);
  return out;
}

void check_hogwild_config(const Config& config, const TrainerOptions& options) {
  if (options.resume) {
    throw ConfigError(fmt::format(
        "--resume {}: a hogwild run keeps no checkpoints and cannot be resumed; start a new run "
        "with --config {}/resolved.toml",
        options.run_dir, options.run_dir));
  }
  if (config.optim.name != "sgd" || config.optim.momentum != 0.0) {
    throw ConfigError(fmt::format(
        "config keys 'optim.name' = \"{}\" and 'optim.momentum' = {}: parallel.strategy = "
        "\"hogwild\" runs plain SGD without momentum; set optim.name = \"sgd\" and optim.momentum "
        "= 0",
        config.optim.name, config.optim.momentum));
  }
}

// The schedule with one step per epoch; batch-size scaling does not apply to per-sample updates.
optim::LrSchedule epoch_schedule(const Config& config) {
  optim::ScheduleConfig schedule = schedule_config(config, 1);
  schedule.global_batch = schedule.base_batch;
  return optim::LrSchedule(schedule);
}

// Loss and accuracy of either engine.
struct Figures {
  double loss = 0.0;
  double accuracy = 0.0;
};
Figures figures(const parallel::LinearEvaluation& e) { return {e.loss, e.accuracy}; }
Figures figures(const parallel::DenseEvaluation& e) { return {e.loss, e.accuracy}; }

// Updates over the threads' summed CPU time: how fast one thread updates while the others run
// (falls below the one-thread figure when threads slow each other down, e.g. by cache-line
// traffic), whatever the machine's load.
double updates_per_cpu_second(std::int64_t updates, const std::vector<double>& cpu_seconds) {
  double total = 0.0;
  for (double seconds : cpu_seconds) total += seconds;
  return total > 0.0 ? static_cast<double>(updates) / total : 0.0;
}

void prepare_run_dir(const fs::path& dir, const Config& config) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create the run folder {}: {}; choose another --out",
                                  dir.string(), ec.message()));
  }
  if (fs::exists(dir / "metrics.jsonl")) {
    throw ConfigError(
        fmt::format("the run folder {} already holds a run (metrics.jsonl); choose another --out",
                    dir.string()));
  }
  write_file_atomically((dir / "resolved.toml").string(), to_toml(config));
}

}  // namespace

RunSummary run_hogwild(const Config& config, const TrainerOptions& options) {
  Stopwatch wall;
  validate(config);
  check_hogwild_config(config, options);
  const TrainSection& t = config.train;
  const optim::LrSchedule schedule = epoch_schedule(config);
  const int threads = static_cast<int>(config.parallel.workers);

  // The engine, behind three functions: the sparse linear model or the dense MLP.
  std::function<parallel::HogwildEpoch(std::int64_t, float)> run_epoch;
  std::function<Figures()> evaluate_train;
  std::function<std::optional<Figures>()> evaluate_test;
  std::string dataset_name;
  std::int64_t parameters = 0;
  nlohmann::json details;
  std::string description;
  std::unique_ptr<SparseRunData> sparse;
  std::unique_ptr<parallel::Hogwild> linear;
  std::unique_ptr<RunData> dense;
  std::unique_ptr<parallel::HogwildDense> mlp;
  if (config.model.name != "mlp") {
    sparse = std::make_unique<SparseRunData>(load_sparse_data(config.data));
    parallel::HogwildOptions hogwild_options;
    hogwild_options.loss = parallel::linear_loss_from_name(config.model.name);
    hogwild_options.threads = threads;
    hogwild_options.l2 = static_cast<float>(config.optim.weight_decay);
    hogwild_options.seed = static_cast<std::uint64_t>(t.seed);
    linear = std::make_unique<parallel::Hogwild>(sparse->train, hogwild_options);
    const data::SparseDataset& train = sparse->train;
    run_epoch = [&](std::int64_t e, float lr) { return linear->run_epoch(e, lr); };
    evaluate_train = [&] { return figures(linear->evaluate(train)); };
    evaluate_test = [&]() -> std::optional<Figures> {
      if (!sparse->test || sparse->test->size() == 0) return std::nullopt;
      return figures(linear->evaluate(*sparse->test));
    };
    dataset_name = train.name;
    parameters = train.num_features;
    details = {{"loss", parallel::linear_loss_name(hogwild_options.loss)},
               {"l2", config.optim.weight_decay},
               {"features", train.num_features},
               {"nonzeros", train.nnz()}};
    description = fmt::format("{} train / {} test samples, {:.1f} non-zeros per sample",
                              train.size(), sparse->test ? sparse->test->size() : 0,
                              static_cast<double>(train.nnz()) /
                                  static_cast<double>(std::max<std::int64_t>(1, train.size())));
  } else {
    if (config.train.loss != "cross_entropy") {
      throw ConfigError(fmt::format(
          "config key 'train.loss' = \"{}\": a hogwild mlp trains with \"cross_entropy\" only",
          config.train.loss));
    }
    dense = std::make_unique<RunData>(load_run_data(config.data));
    parallel::HogwildDenseOptions dense_options;
    dense_options.threads = threads;
    dense_options.batch_size = t.batch_size;
    dense_options.weight_decay = static_cast<float>(config.optim.weight_decay);
    dense_options.seed = static_cast<std::uint64_t>(t.seed);
    mlp = std::make_unique<parallel::HogwildDense>(
        model_spec(config.model, dense->train.sample_shape(), dense->train.num_classes),
        dense->train, dense_options);
    run_epoch = [&](std::int64_t e, float lr) { return mlp->run_epoch(e, lr); };
    evaluate_train = [&] { return figures(mlp->evaluate(dense->train)); };
    evaluate_test = [&]() -> std::optional<Figures> {
      if (dense->test.size() == 0) return std::nullopt;
      return figures(mlp->evaluate(dense->test));
    };
    dataset_name = dense->train.name;
    parameters = mlp->num_params();
    details = {{"batch_size_per_thread_step", t.batch_size},
               {"weight_decay", config.optim.weight_decay}};
    description = fmt::format("{} train / {} test samples, batches of {} per thread step",
                              dense->train.size(), dense->test.size(), t.batch_size);
  }

  const fs::path dir(options.run_dir);
  prepare_run_dir(dir, config);
  MetricsLog metrics((dir / "metrics.jsonl").string(), false);
  Progress progress(options.out, Progress::detect_style(options.out, options.quiet), t.epochs);
  progress.message(fmt::format(
      "dtrain: hogwild {} ({} parameters) on {} ({}), {} threads without locks, {} "
      "epochs; run folder {}",
      config.model.name, parameters, dataset_name, description, threads, t.epochs, dir.string()));

  AccuracyTargets targets(t.accuracy_targets);
  std::int64_t updates = 0;
  double train_seconds = 0.0;
  double best_accuracy = 0.0;
  Figures last_train;
  std::optional<Figures> last_test;
  std::vector<double> epoch_rates;
  std::vector<std::int64_t> thread_updates(static_cast<std::size_t>(threads), 0);
  std::vector<double> thread_cpu_seconds(thread_updates.size(), 0.0);
  for (std::int64_t e = 0; e < t.epochs; ++e) {
    const auto lr = static_cast<float>(schedule.lr(e));
    const parallel::HogwildEpoch epoch = run_epoch(e, lr);
    updates += epoch.updates;
    train_seconds += epoch.seconds;
    epoch_rates.push_back(epoch.updates_per_second);
    for (std::size_t i = 0; i < thread_updates.size(); ++i) {
      thread_updates[i] += epoch.thread_updates[i];
      thread_cpu_seconds[i] += epoch.thread_cpu_seconds[i];
    }
    last_train = evaluate_train();
    last_test = evaluate_test();
    const double accuracy = last_test ? last_test->accuracy : last_train.accuracy;
    best_accuracy = std::max(best_accuracy, accuracy);
    targets.observe(accuracy, train_seconds);

    EpochRecord record;
    record.epoch = e + 1;
    record.step = updates;
    record.train_loss = last_train.loss;
    record.train_accuracy = last_train.accuracy;
    record.test_loss = last_test ? last_test->loss : 0.0;
    record.test_accuracy = last_test ? last_test->accuracy : 0.0;
    record.samples_per_second = epoch.updates_per_second;
    record.epoch_seconds = epoch.seconds;
    record.train_seconds = train_seconds;
    record.elapsed = wall.seconds();
    nlohmann::json line = to_json(record);
    line["lr"] = lr;
    line["updates"] = epoch.updates;
    line["updates_per_second"] = epoch.updates_per_second;
    line["thread_updates"] = epoch.thread_updates;
    line["thread_cpu_seconds"] = epoch.thread_cpu_seconds;
    if (!last_test) {
      line["test_loss"] = nullptr;
      line["test_accuracy"] = nullptr;
    }
    metrics.write(line);
    progress.message(fmt::format(
        "epoch {}/{}  loss {:.4f}  train {:.2f}%{}  lr {:.4g}  {:.0f} updates/s  {:.3f} s", e + 1,
        t.epochs, last_train.loss, 100.0 * last_train.accuracy,
        last_test ? fmt::format("  test loss {:.4f}  test {:.2f}%", last_test->loss,
                                100.0 * last_test->accuracy)
                  : std::string(),
        lr, epoch.updates_per_second, epoch.seconds));
  }

  RunSummary summary;
  summary.model = config.model.name;
  summary.dataset = dataset_name;
  summary.parameters = parameters;
  summary.epochs = t.epochs;
  summary.steps = updates;
  summary.samples = updates;
  summary.final_train_loss = last_train.loss;
  summary.final_test_loss = last_test ? last_test->loss : last_train.loss;
  summary.final_test_accuracy = last_test ? last_test->accuracy : last_train.accuracy;
  summary.best_test_accuracy = best_accuracy;
  summary.wall_seconds = wall.seconds();
  summary.train_seconds = train_seconds;
  summary.train_samples_per_second =
      train_seconds > 0.0 ? static_cast<double>(updates) / train_seconds : 0.0;
  summary.time_to_accuracy = targets.to_json();
  summary.seed = t.seed;
  summary.threads = threads;
  summary.parallel = {
      {"strategy", "hogwild"},
      {"workers", threads},
      {"test_set", last_test.has_value()},
      {"accuracy_on", last_test ? "test" : "train"},
      {"updates", updates},
      {"updates_per_second", summary.train_samples_per_second},
      {"median_epoch_updates_per_second", median(epoch_rates)},
      {"epoch_updates_per_second", epoch_rates},
      {"thread_updates", thread_updates},
      {"thread_cpu_seconds", thread_cpu_seconds},
      {"updates_per_cpu_second", updates_per_cpu_second(updates, thread_cpu_seconds)},
      {"final_train_accuracy", last_train.accuracy}};
  summary.parallel.update(details);
  write_summary((dir / "summary.json").string(), summary);
  progress.message(fmt::format(
      "done: {} accuracy {:.2f}% (best {:.2f}%), train loss {:.4f}, {:.0f} updates/s on {} "
      "threads; summary in {}",
      last_test ? "test" : "train", 100.0 * summary.final_test_accuracy,
      100.0 * summary.best_test_accuracy, summary.final_train_loss,
      summary.train_samples_per_second, threads, (dir / "summary.json").string()));
  return summary;
}

}  // namespace dtrain::train
