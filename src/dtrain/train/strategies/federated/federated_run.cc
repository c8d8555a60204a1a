#include "dtrain/train/strategies/federated/federated_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <numeric>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/timer.h"
#include "dtrain/compress/codec_spec.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/data/client_partition.h"
#include "dtrain/nn/loss.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/parallel/rank_agreement.h"
#include "dtrain/parallel/reducers/compressed_reducer.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/resume_records.h"
#include "dtrain/train/strategies/federated/client_update.h"
#include "dtrain/train/strategies/federated/federated_average.h"
#include "dtrain/train/strategies/federated/round_plan.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kEvalBatch = 1000;

// Bytes every rank sent so far, over all operations of its communicator.
std::int64_t bytes_sent(comm::Communicator* comm) {
  if (comm == nullptr) return 0;
  std::int64_t total = 0;
  for (const auto& [op, stats] : comm->stats().snapshot()) total += stats.bytes_sent;
  return total;
}

// partition.json: the partition's figures, then one line per client (its label histogram), so that
// 100 clients read as 100 rows.
std::string partition_json(const data::ClientPartition& partition, const data::Dataset& train,
                           const std::string& name, std::uint64_t seed) {
  const nlohmann::json head = {{"partition", name},
                               {"clients", partition.clients_count()},
                               {"samples", train.size()},
                               {"classes", train.num_classes},
                               {"seed", seed},
                               {"redraws", partition.redraws},
                               {"sizes", partition.sizes()}};
  std::string text = head.dump();
  text.pop_back();  // the closing brace
  text += ",\n\"label_histogram\": [\n";
  const auto histogram = label_histogram(partition, train.labels, train.num_classes);
  for (std::size_t k = 0; k < histogram.size(); ++k) {
    text += nlohmann::json(histogram[k]).dump() + (k + 1 < histogram.size() ? ",\n" : "\n");
  }
  return text + "]}\n";
}

}  // namespace

void check_federated_config(const Config& config, int ranks) {
  const FederatedSection& f = config.federated;
  if (ranks > f.clients) {
    throw ConfigError(fmt::format(
        "federated.clients = {} is fewer than the {} ranks (parallel.workers x processes): every "
        "rank simulates at least one client; use at most {} ranks or more clients",
        f.clients, ranks, f.clients));
  }
  if (config.data.dataset == "text") {
    throw ConfigError(
        "parallel.strategy = \"federated\" needs a data set with one label per sample (the "
        "partitions split by label); data.dataset = \"text\" has one per position");
  }
}

struct FederatedRun::Impl {
  Impl(comm::Communicator* c, const Config& cfg, const TrainerOptions& opts,
       std::shared_ptr<const RunData> d)
      : comm(c),
        config(cfg),
        options(opts),
        data(std::move(d)),
        rank(c != nullptr ? c->rank() : 0),
        ranks(c != nullptr ? c->size() : 1) {}

  comm::Communicator* comm;
  Config config;
  TrainerOptions options;
  std::shared_ptr<const RunData> data;
  int rank;
  int ranks;
  std::unique_ptr<nn::Model> model;
  data::ClientPartition partition;
  std::string partition_name;
  TraceRecorder trace;  // never started
  std::unique_ptr<LocalGradients> eval_loss;
  std::unique_ptr<ClientTrainer> clients;

  // Mean loss and accuracy of the model's store over the test set, sharded over the ranks.
  std::pair<double, double> evaluate() {
    const data::Dataset& test = data->test;
    const std::int64_t n = test.size();
    if (n == 0) return {0.0, 0.0};
    const std::int64_t first = n * rank / ranks;
    const std::int64_t last = n * (rank + 1) / ranks;
    std::vector<std::int64_t> indices(static_cast<std::size_t>(last - first));
    std::iota(indices.begin(), indices.end(), first);
    tensor::Tensor x;
    std::vector<std::int32_t> y;
    double sums[2] = {0.0, 0.0};
    for (std::int64_t begin = 0; begin < last - first; begin += kEvalBatch) {
      const std::int64_t count = std::min(kEvalBatch, last - first - begin);
      data::gather_batch(test,
                         std::span<const std::int64_t>(indices).subspan(
                             static_cast<std::size_t>(begin), static_cast<std::size_t>(count)),
                         x, y);
      const tensor::Tensor& logits = model->forward(
          x, nn::ForwardContext{nn::Mode::kEval, static_cast<std::uint64_t>(config.train.seed), 0});
      sums[0] +=
          static_cast<double>(eval_loss->loss(logits, y, nullptr)) * static_cast<double>(count);
      sums[1] += static_cast<double>(nn::count_correct(logits, y));
    }
    if (comm != nullptr) comm->allreduce(sums, 2, DType::kF64, comm::ReduceOp::kSum);
    return {sums[0] / static_cast<double>(n), sums[1] / static_cast<double>(n)};
  }
};

FederatedRun::FederatedRun(comm::Communicator* comm, const Config& config,
                           const TrainerOptions& options, std::shared_ptr<const RunData> data)
    : impl_(std::make_unique<Impl>(comm, config, options, std::move(data))) {
  Impl& s = *impl_;
  validate(s.config);
  check_federated_config(s.config, s.ranks);
  if (s.data == nullptr) s.data = std::make_shared<const RunData>(load_run_data(s.config.data));
  const data::Dataset& train = s.data->train;
  if (train.size() == 0) {
    throw DataError(fmt::format("the training set of {} in {} is empty", s.config.data.dataset,
                                s.config.data.path));
  }
  const nn::ModelSpec spec = model_spec(s.config.model, train.sample_shape(), train.num_classes);
  s.model = nn::build_model(spec);
  s.model->init(static_cast<std::uint64_t>(s.config.train.seed));
  if (comm != nullptr) {
    parallel::check_same_on_all_ranks(*comm, to_toml(s.config), "the configuration");
  }
  const data::PartitionSpec partition = data::parse_partition(s.config.federated.partition);
  s.partition_name = data::partition_name(partition);
  s.partition = data::partition_clients(train.labels, train.num_classes, s.config.federated.clients,
                                        partition, static_cast<std::uint64_t>(s.config.train.seed));
  s.eval_loss = std::make_unique<LocalGradients>(s.config, *s.model, 0, 1, s.trace);
  s.clients = std::make_unique<ClientTrainer>(s.config, *s.model, train);
  const nn::ParamStore& store = s.model->store();
  global_params_.assign(store.params(), store.params() + store.num_params());
  global_buffers_.assign(store.buffers(), store.buffers() + store.num_buffer_elements());
}

FederatedRun::~FederatedRun() = default;

RunSummary FederatedRun::run() {
  Impl& s = *impl_;
  Stopwatch wall;
  const Config& config = s.config;
  const FederatedSection& f = config.federated;
  const TrainSection& t = config.train;
  const auto seed = static_cast<std::uint64_t>(t.seed);
  const bool writer = s.rank == 0;
  const fs::path dir(s.options.run_dir);
  nn::ParamStore& store = s.model->store();
  const std::int64_t values = store.num_params() + store.num_buffer_elements();
  const std::int64_t model_bytes = 4 * values;  // one f32 model
  const std::int64_t per_round = clients_per_round(f.clients, f.client_fraction);
  // federated.compression (docs/FEDERATED.md, "Compression"): each upload is the client's model
  // delta from the round's global model through the codec, the buffers in f32; no error feedback
  // (clients are stateless). compress_download: the server's broadcast is the global model's delta
  // through the same codec, with error feedback at the server where the codec's default has it.
  compress::CodecSpec codec_spec = compress::parse_codec(f.compression);
  const std::unique_ptr<compress::Codec> codec = compress::make_codec(codec_spec);
  const bool compress_down = codec != nullptr && f.compress_download;
  const std::int64_t n_params = store.num_params();
  const std::int64_t compressed_bytes =
      codec ? static_cast<std::int64_t>(codec->encoded_bytes(n_params)) +
                  4 * store.num_buffer_elements()
            : model_bytes;
  const std::int64_t up_bytes = compressed_bytes;  // per completed client
  const std::int64_t down_bytes = compress_down ? compressed_bytes : model_bytes;
  const std::string up_text = codec ? fmt::format("{} payload ({} B) + 4B", codec_spec.text(),
                                                  codec->encoded_bytes(n_params))
                                    : std::string("4 (N + B)");
  const std::string down_text =
      compress_down
          ? fmt::format("{} payload ({} B) + 4B", codec_spec.text(), codec->encoded_bytes(n_params))
          : std::string("4 (N + B)");
  std::vector<std::uint8_t> payload(codec ? codec->encoded_bytes(n_params) : 0);
  std::vector<float> delta(codec ? static_cast<std::size_t>(n_params) : 0);
  std::vector<float> previous_global;
  std::optional<compress::ErrorFeedback> server_feedback;
  if (compress_down && codec_spec.error_feedback) server_feedback.emplace(n_params);
  std::vector<float> sent(server_feedback ? static_cast<std::size_t>(n_params) : 0);

  std::optional<MetricsLog> metrics;
  if (writer) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      throw ConfigError(fmt::format("cannot create the run folder {}: {}; choose another --out",
                                    dir.string(), ec.message()));
    }
    if (!s.options.resume && fs::exists(dir / "metrics.jsonl")) {
      throw ConfigError(fmt::format(
          "the run folder {} already holds a run (metrics.jsonl); continue it with --resume {} or "
          "choose another --out",
          dir.string(), dir.string()));
    }
  }

  // Checkpoints (docs/FEDERATED.md, "Checkpoints"): after every train.checkpoint_every rounds,
  // the last round and a stop, rank 0 saves the global model, the server's error-feedback residual
  // and the run's counters; a round's clients keep no state across rounds and draw everything from
  // (train.seed, round, client), so a resume continues bitwise, on any number of ranks up to the
  // f64 rounding of the round's sum (the rank count changes its order).
  CheckpointDir checkpoints((dir / "checkpoints").string(), t.keep_checkpoints);
  bool resume = s.options.resume;
  if (resume && !checkpoints.has_any()) {
    resume = false;
    if (writer) {
      log::info(
          "{} holds no checkpoint yet (the run stopped before its first round ended): training "
          "it from the beginning",
          (dir / "checkpoints").string());
      drop_records_after((dir / "metrics.jsonl").string(), 0);
    }
  }
  std::int64_t first_round = 0;
  std::optional<Checkpoint> restored;
  if (resume) {
    VerifiedCheckpoint verified = checkpoints.newest_good();
    const Checkpoint& c = verified.checkpoint;
    if (c.seed != seed) {
      throw CheckpointError(fmt::format(
          "checkpoint {} was written with train.seed = {} but the run's resolved.toml says {}",
          verified.path, c.seed, t.seed));
    }
    restore_into(c, store, verified.path);
    global_params_.assign(store.params(), store.params() + store.num_params());
    global_buffers_.assign(store.buffers(), store.buffers() + store.num_buffer_elements());
    first_round = c.epoch;
    // Past the end as configured (fewer --rounds than done): refused before anything is
    // rewritten; exactly the end with summary.json missing: the summary is written from it.
    if (first_round > f.rounds) {
      throw ConfigError(fmt::format(
          "--resume {}: the newest checkpoint {} is past --rounds {} ({} round{} done); give "
          "--rounds {} or more to continue it",
          dir.string(), verified.path, f.rounds, first_round, first_round == 1 ? "" : "s",
          first_round + 1));
    }
    const bool summary_missing = !fs::exists(dir / "summary.json");
    if (first_round == f.rounds && !summary_missing) {
      throw ConfigError(fmt::format(
          "checkpoint {} is at round {} and federated.rounds = {}: nothing left to train; pass "
          "--rounds N with N > {} to train further",
          verified.path, first_round, f.rounds, first_round));
    }
    if (first_round == f.rounds && writer) {
      log::info(
          "{} is the run's last checkpoint and summary.json is missing: writing the summary "
          "from it",
          verified.path);
    }
    if (writer) drop_records_after((dir / "metrics.jsonl").string(), first_round);
    restored = std::move(verified.checkpoint);
  }
  if (writer) {
    write_file_atomically((dir / "resolved.toml").string(), to_toml(config));
    write_file_atomically((dir / "partition.json").string(),
                          partition_json(s.partition, s.data->train, s.partition_name, seed));
    metrics.emplace((dir / "metrics.jsonl").string(), resume);
  }
  Progress progress(
      s.options.out,
      writer ? Progress::detect_style(s.options.out, s.options.quiet) : Progress::Style::kQuiet,
      f.rounds);
  const auto sizes = s.partition.sizes();
  progress.message(fmt::format(
      "dtrain: federated {} ({} parameters) on {}, {} clients ({}: {} to {} samples each) on {} "
      "rank(s), {} per round (C = {}), E = {} local epoch(s) of batch {}{}, {} rounds; run folder "
      "{}",
      config.model.name, store.num_params(), s.data->train.name, f.clients, s.partition_name,
      *std::min_element(sizes.begin(), sizes.end()), *std::max_element(sizes.begin(), sizes.end()),
      s.ranks, per_round, f.client_fraction, f.local_epochs, t.batch_size,
      f.fedprox_mu > 0.0 ? fmt::format(", FedProx mu = {}", f.fedprox_mu) : std::string(), f.rounds,
      dir.string()));
  progress.message(fmt::format(
      "traffic per round: down = participants x {} = {} x {} = {} bytes, up = completed x {} (<= "
      "{} bytes)",
      down_text, per_round, down_bytes, per_round * down_bytes, up_text, per_round * up_bytes));
  if (codec) {
    progress.message(fmt::format(
        "uploads compressed: each client's model delta through {}, no error feedback (clients "
        "are stateless); download {}",
        codec_spec.text(),
        compress_down ? fmt::format("compressed too (the global model's delta), error feedback {}",
                                    server_feedback ? "on at the server" : "off")
                      : std::string("in f32 (federated.compress_download = false)")));
  }

  FederatedAverage average(store.num_params(), store.num_buffer_elements());
  AccuracyTargets targets(t.accuracy_targets);
  std::vector<std::optional<std::int64_t>> target_rounds(t.accuracy_targets.size());
  std::vector<std::optional<std::int64_t>> target_bytes(t.accuracy_targets.size());
  std::int64_t bytes_down = 0;
  std::int64_t bytes_up = 0;
  std::int64_t completed_total = 0;
  std::int64_t failed_total = 0;
  std::int64_t steps_total = 0;
  std::int64_t seen_total = 0;
  double train_seconds = 0.0;
  double best_accuracy = 0.0;
  double last_train_loss = 0.0;
  std::pair<double, double> last_eval{0.0, 0.0};
  std::vector<double> round_accuracy;
  const std::int64_t rank_bytes_start = bytes_sent(s.comm);
  std::int64_t rounds_run = 0;
  int stopped_by = 0;          // the signal that stopped the run early, or 0
  double previous_wall = 0.0;  // wall seconds of the runs before a resume
  auto elapsed = [&] { return previous_wall + wall.seconds(); };
  auto round_scalar = [](std::int64_t round) { return fmt::format("round_accuracy:{}", round); };
  auto target_scalars = [&](std::size_t i) {
    const std::string key = AccuracyTargets::key(t.accuracy_targets[i]);
    return std::pair{"rounds_to:" + key, "bytes_to:" + key};
  };
  constexpr const char* kServerResidual = "federated/server_residual";
  if (restored) {
    const Checkpoint& c = *restored;
    auto count = [&](const char* name) { return static_cast<std::int64_t>(c.scalar(name, 0.0)); };
    bytes_down = count("bytes_down");
    bytes_up = count("bytes_up");
    completed_total = count("completed_clients");
    failed_total = count("failed_clients");
    steps_total = count("local_steps");
    seen_total = count("samples");
    train_seconds = c.scalar("train_seconds", 0.0);
    previous_wall = c.scalar("wall_seconds", 0.0);
    best_accuracy = c.scalar("best_test_accuracy", 0.0);
    last_train_loss = c.scalar("final_train_loss", 0.0);
    last_eval = {c.scalar("final_test_loss", 0.0), c.scalar("final_test_accuracy", 0.0)};
    for (std::int64_t round = 1; round <= first_round; ++round) {
      round_accuracy.push_back(c.scalar(round_scalar(round), 0.0));
    }
    for (std::size_t i = 0; i < target_rounds.size(); ++i) {
      const auto [rounds_name, bytes_name] = target_scalars(i);
      const double reached_round = c.scalar(rounds_name, -1.0);
      if (reached_round >= 0.0) {
        target_rounds[i] = static_cast<std::int64_t>(reached_round);
        target_bytes[i] = static_cast<std::int64_t>(c.scalar(bytes_name, 0.0));
      }
    }
    restore_accuracy_targets(c, targets);
    if (server_feedback) {
      const auto saved =
          std::find_if(c.optimizer_state.begin(), c.optimizer_state.end(),
                       [&](const NamedValues& v) { return v.name == kServerResidual; });
      if (saved == c.optimizer_state.end() || std::ssize(saved->values) != n_params) {
        throw CheckpointError(fmt::format(
            "the checkpoint of round {} holds no server residual of {} values for "
            "federated.compress_download's error feedback; resume with the configuration it was "
            "written with",
            first_round, n_params));
      }
      server_feedback->set_residual(saved->values);
    }
    rounds_run = first_round;
    progress.message(fmt::format("resuming after round {} of {} ({:.2f}% test accuracy)",
                                 first_round, f.rounds, 100.0 * last_eval.second));
  }
  // Rank 0, after round `rounds_done` (the store holds the global model). Returns the path.
  auto save = [&](std::int64_t rounds_done) {
    Checkpoint c;
    c.epoch = rounds_done;
    c.global_step = steps_total;
    c.seed = seed;
    c.sampler_epoch = rounds_done;
    c.scalars = {{"world_size", static_cast<double>(s.ranks)},
                 {"bytes_down", static_cast<double>(bytes_down)},
                 {"bytes_up", static_cast<double>(bytes_up)},
                 {"completed_clients", static_cast<double>(completed_total)},
                 {"failed_clients", static_cast<double>(failed_total)},
                 {"local_steps", static_cast<double>(steps_total)},
                 {"samples", static_cast<double>(seen_total)},
                 {"train_seconds", train_seconds},
                 {"wall_seconds", elapsed()},
                 {"best_test_accuracy", best_accuracy},
                 {"final_train_loss", last_train_loss},
                 {"final_test_loss", last_eval.first},
                 {"final_test_accuracy", last_eval.second}};
    for (std::size_t r = 0; r < round_accuracy.size(); ++r) {
      c.scalars.emplace_back(round_scalar(static_cast<std::int64_t>(r) + 1), round_accuracy[r]);
    }
    for (std::size_t i = 0; i < target_rounds.size(); ++i) {
      if (!target_rounds[i]) continue;
      const auto [rounds_name, bytes_name] = target_scalars(i);
      c.scalars.emplace_back(rounds_name, static_cast<double>(*target_rounds[i]));
      c.scalars.emplace_back(bytes_name, static_cast<double>(*target_bytes[i]));
    }
    save_accuracy_targets(targets, c);
    capture_from(store, c);
    if (server_feedback) {
      const auto residual = server_feedback->residual();
      c.optimizer_state.push_back({kServerResidual, {residual.begin(), residual.end()}});
    }
    try {
      return checkpoints.save(c);
    } catch (const CheckpointError& e) {
      throw CheckpointError(fmt::format(
          "{}; once that is mended (free space, for a full disk), continue with --resume",
          e.what()));
    }
  };

  for (std::int64_t round = first_round; round < f.rounds; ++round) {
    Stopwatch round_clock;
    const std::vector<std::int64_t> participants =
        sample_round_clients(f.clients, per_round, seed, round);
    average.reset();
    RoundCounts& counts = average.counts();
    for (const std::int64_t client : rank_clients(participants, s.rank, s.ranks)) {
      const bool fail = client_fails(f.client_failure, seed, round, client);
      try {
        const ClientResult result =
            s.clients->train(s.partition.clients[static_cast<std::size_t>(client)], global_params_,
                             global_buffers_, round, client, fail);
        if (codec) {
          // What the server receives: w_g + decode(encode(w_k - w_g)).
          float* params = store.params();
          for (std::int64_t i = 0; i < n_params; ++i) {
            delta[static_cast<std::size_t>(i)] =
                params[i] - global_params_[static_cast<std::size_t>(i)];
          }
          const std::uint64_t upload_seed =
              parallel::codec_seed(seed, static_cast<std::size_t>(client) + 1, round, -1);
          codec->encode(delta.data(), n_params, payload.data(), upload_seed);
          codec->decode(payload.data(), n_params, delta.data(), upload_seed);
          for (std::int64_t i = 0; i < n_params; ++i) {
            params[i] =
                global_params_[static_cast<std::size_t>(i)] + delta[static_cast<std::size_t>(i)];
          }
        }
        average.add(
            result.samples,
            std::span<const float>(store.params(), static_cast<std::size_t>(store.num_params())),
            std::span<const float>(store.buffers(),
                                   static_cast<std::size_t>(store.num_buffer_elements())));
        counts.completed += 1.0;
        counts.samples += static_cast<double>(result.samples);
        counts.seen += static_cast<double>(result.seen);
        counts.loss_sum += result.loss_sum;
        counts.correct += static_cast<double>(result.correct);
        counts.steps += static_cast<double>(result.steps);
      } catch (const ClientFailure&) {
        // Dropped: its model never reaches the sum; the round line counts it.
        counts.failed += 1.0;
      }
    }
    // A stop signal ends the run after this round on every rank: the ranks agree in the same
    // allreduce (a process under mpirun may not have seen it).
    counts.stop = stop_requested() != 0 ? 1.0 : 0.0;
    average.allreduce(s.comm);
    if (compress_down) previous_global = global_params_;
    const bool moved = average.average_into(global_params_, global_buffers_);
    if (compress_down && moved) {
      // What the participants of the next round receive: the old model plus the decoded delta
      // (every rank computes the same, so the server's error feedback is the same everywhere).
      for (std::int64_t i = 0; i < n_params; ++i) {
        const auto k = static_cast<std::size_t>(i);
        delta[k] = global_params_[k] - previous_global[k];
      }
      const std::uint64_t download_seed = parallel::codec_seed(seed, 0, round, -1);
      if (server_feedback) {
        server_feedback->encode(*codec, 0, delta.data(), n_params, payload.data(), download_seed,
                                sent.data());
      } else {
        codec->encode(delta.data(), n_params, payload.data(), download_seed);
      }
      codec->decode(payload.data(), n_params, delta.data(), download_seed);
      for (std::int64_t i = 0; i < n_params; ++i) {
        const auto k = static_cast<std::size_t>(i);
        global_params_[k] = previous_global[k] + delta[k];
      }
    }
    const double round_seconds = round_clock.seconds();
    train_seconds += round_seconds;
    const auto completed = static_cast<std::int64_t>(counts.completed);
    const auto failed = static_cast<std::int64_t>(counts.failed);
    if (!moved && writer) {
      log::warn("round {}: all {} participants failed; the global model stays as it was", round + 1,
                per_round);
    }
    const std::int64_t down = per_round * down_bytes;
    const std::int64_t up = completed * up_bytes;
    bytes_down += down;
    bytes_up += up;
    completed_total += completed;
    failed_total += failed;
    steps_total += static_cast<std::int64_t>(counts.steps);
    seen_total += static_cast<std::int64_t>(counts.seen);
    const double train_loss = counts.seen > 0.0 ? counts.loss_sum / counts.seen : 0.0;
    const double train_accuracy = counts.seen > 0.0 ? counts.correct / counts.seen : 0.0;
    if (counts.seen > 0.0) last_train_loss = train_loss;

    std::copy(global_params_.begin(), global_params_.end(), store.params());
    std::copy(global_buffers_.begin(), global_buffers_.end(), store.buffers());
    last_eval = s.evaluate();
    const double accuracy = last_eval.second;
    best_accuracy = std::max(best_accuracy, accuracy);
    round_accuracy.push_back(accuracy);
    targets.observe(accuracy, train_seconds);
    for (std::size_t i = 0; i < target_rounds.size(); ++i) {
      if (!target_rounds[i] && accuracy >= t.accuracy_targets[i]) {
        target_rounds[i] = round + 1;
        target_bytes[i] = bytes_down + bytes_up;
      }
    }
    if (writer) {
      nlohmann::json line = {{"kind", "round"},
                             {"round", round + 1},
                             {"epoch", round + 1},
                             {"participants", per_round},
                             {"completed", completed},
                             {"failed", failed},
                             {"samples", static_cast<std::int64_t>(counts.samples)},
                             {"local_steps", static_cast<std::int64_t>(counts.steps)},
                             {"bytes_down", down},
                             {"bytes_up", up},
                             {"bytes_down_formula", fmt::format("participants x {} = {} x {}",
                                                                down_text, per_round, down_bytes)},
                             {"bytes_up_formula", fmt::format("completed x {} = {} x {}", up_text,
                                                              completed, up_bytes)},
                             {"bytes_total", bytes_down + bytes_up},
                             {"train_loss", train_loss},
                             {"train_accuracy", train_accuracy},
                             {"test_loss", last_eval.first},
                             {"test_accuracy", accuracy},
                             {"round_seconds", round_seconds},
                             {"train_seconds", train_seconds},
                             {"elapsed", elapsed()}};
      metrics->write(line);
    }
    progress.message(fmt::format(
        "round {}/{}  clients {}{}  train loss {:.4f}  test loss {:.4f}  test {:.2f}%  {:.2f} MB "
        "so far  {:.3f} s",
        round + 1, f.rounds, completed,
        failed > 0 ? fmt::format(" ({} failed)", failed) : std::string(), train_loss,
        last_eval.first, 100.0 * accuracy, static_cast<double>(bytes_down + bytes_up) / 1e6,
        round_seconds));
    rounds_run = round + 1;
    const bool stopping = counts.stop > 0.0 && rounds_run < f.rounds;
    std::string saved;
    if (writer && (rounds_run == f.rounds || stopping ||
                   (t.checkpoint_every > 0 && rounds_run % t.checkpoint_every == 0))) {
      try {
        saved = save(rounds_run);
      } catch (const CheckpointError& e) {
        // Inside the run the previous checkpoint stays and the rounds go on; the last one must
        // be on disk before the run reports success.
        if (rounds_run == f.rounds || stopping) throw;
        log::warn("{}; the rounds go on, and a resume would start from the previous checkpoint",
                  e.what());
      }
    }
    if (stopping) {
      stopped_by = stop_requested() != 0 ? stop_requested() : SIGTERM;
      if (writer) {
        log::warn(
            "stopped by {} after round {} of {}: checkpoint {}; continue with `dtrain train "
            "--resume {}`",
            stop_signal_name(stopped_by), rounds_run, f.rounds, saved, dir.string());
      }
      break;
    }
  }
  const std::int64_t rank_bytes = bytes_sent(s.comm) - rank_bytes_start;

  RunSummary summary;
  summary.model = config.model.name;
  summary.dataset = s.data->train.name;
  summary.parameters = store.num_params();
  summary.epochs = rounds_run;
  summary.stopped_by_signal = stopped_by;
  summary.steps = steps_total;
  summary.samples = seen_total;
  summary.final_train_loss = last_train_loss;
  summary.final_test_loss = last_eval.first;
  summary.final_test_accuracy = last_eval.second;
  summary.best_test_accuracy = best_accuracy;
  summary.wall_seconds = elapsed();
  summary.resumed_from_epoch = first_round;
  summary.train_seconds = train_seconds;
  summary.train_samples_per_second =
      train_seconds > 0.0 ? static_cast<double>(seen_total) / train_seconds : 0.0;
  summary.time_to_accuracy = targets.to_json();
  summary.seed = t.seed;
  summary.threads = t.threads;
  nlohmann::json rounds_to = nlohmann::json::object();
  nlohmann::json bytes_to = nlohmann::json::object();
  for (std::size_t i = 0; i < target_rounds.size(); ++i) {
    const std::string key = AccuracyTargets::key(t.accuracy_targets[i]);
    rounds_to[key] = target_rounds[i] ? nlohmann::json(*target_rounds[i]) : nlohmann::json(nullptr);
    bytes_to[key] = target_bytes[i] ? nlohmann::json(*target_bytes[i]) : nlohmann::json(nullptr);
  }
  summary.parallel = {
      {"strategy", "federated"},
      {"ranks", s.ranks},
      {"clients", f.clients},
      {"client_fraction", f.client_fraction},
      {"clients_per_round", per_round},
      {"local_epochs", f.local_epochs},
      {"local_batch", t.batch_size},
      {"partition", s.partition_name},
      {"partition_redraws", s.partition.redraws},
      {"fedprox_mu", f.fedprox_mu},
      {"client_failure", f.client_failure},
      {"rounds", rounds_run},
      {"rounds_planned", f.rounds},
      {"model_values", values},
      {"model_bytes", model_bytes},
      {"bytes_down", bytes_down},
      {"bytes_up", bytes_up},
      {"bytes_down_predicted", rounds_run * per_round * down_bytes},
      {"bytes_up_predicted", completed_total * up_bytes},
      {"compression", codec_spec.text()},
      {"compress_download", compress_down},
      {"upload_bytes_per_client", up_bytes},
      {"download_bytes_per_client", down_bytes},
      {"bytes_formula",
       fmt::format("down = rounds x participants x {} = {} x {} x {}; up = completed x {} = {} x "
                   "{}",
                   down_text, rounds_run, per_round, down_bytes, up_text, completed_total,
                   up_bytes)},
      {"completed_clients", completed_total},
      {"failed_clients", failed_total},
      {"rounds_to_accuracy", rounds_to},
      {"bytes_to_accuracy", bytes_to},
      {"round_test_accuracy", round_accuracy},
      {"rank_bytes_sent", rank_bytes},
      {"rank_bytes_note",
       fmt::format("the simulation's own traffic from rank 0: one f64 allreduce of N + B + 8 = {} "
                   "values per round and evaluation sums",
                   average.reduced_values())}};
  if (writer && stopped_by == 0) {
    write_summary((dir / "summary.json").string(), summary);
    std::string reached;
    for (std::size_t i = 0; i < target_rounds.size(); ++i) {
      reached +=
          fmt::format("  {:.0f}%: {}", 100.0 * t.accuracy_targets[i],
                      target_rounds[i] ? fmt::format("round {} ({:.1f} MB)", *target_rounds[i],
                                                     static_cast<double>(*target_bytes[i]) / 1e6)
                                       : std::string("not reached"));
    }
    progress.message(fmt::format(
        "done: test accuracy {:.2f}% (best {:.2f}%) after {} rounds, {:.1f} MB down + {:.1f} MB "
        "up, {} clients dropped;{} summary in {}",
        100.0 * summary.final_test_accuracy, 100.0 * best_accuracy, rounds_run,
        static_cast<double>(bytes_down) / 1e6, static_cast<double>(bytes_up) / 1e6, failed_total,
        reached.empty() ? std::string(" no targets;") : reached + ";",
        (dir / "summary.json").string()));
  }
  return summary;
}

std::optional<RunSummary> run_federated_rank(comm::Communicator& comm, const Config& config,
                                             const TrainerOptions& options,
                                             const std::shared_ptr<const RunData>& data) {
  FederatedRun run(&comm, config, options, data);
  return run.run();
}

}  // namespace dtrain::train
