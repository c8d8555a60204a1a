// dtrain train: flags -> train::Config -> train::Trainer.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "dtrain/base/env.h"
#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/train/config.h"
#include "dtrain/train/fork_server.h"
#include "dtrain/train/grow_probe.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/standby.h"
#include "dtrain/train/strategy_registry.h"
#include "dtrain/train/supervisor.h"
#include "dtrain/train/trainer.h"

namespace dtrain::apps {
namespace {

namespace fs = std::filesystem;

struct TrainFlags {
  std::string config;
  std::vector<std::string> sets;
  std::string out;
  std::string resume;
  std::int64_t epochs = 0;
  std::int64_t threads = 0;
  std::int64_t workers = 0;
  std::string strategy;
  std::string allreduce;
  std::string bucket_bytes;
  std::string overlap;
  bool no_overlap = false;
  std::string zero_stage;
  std::string sum_in_update;
  std::string compression;
  std::string aggregator;
  std::string attack;
  std::int64_t byzantine = -1;
  bool sync_bn = false;
  std::string straggler;
  std::int64_t servers = 0;
  bool colocate_servers = false;
  std::string consistency;
  std::int64_t staleness = -1;
  std::int64_t pull_every = 0;
  std::int64_t backup_workers = -1;
  std::int64_t period = 0;
  std::int64_t micro_batches = 0;
  std::int64_t tp = 0;
  std::int64_t dp = 0;
  std::int64_t pp = 0;
  std::int64_t sp = 0;
  std::string schedule;
  std::string topology;
  std::int64_t clients = 0;
  std::optional<double> client_fraction;  // any value given is passed on (0 is refused there)
  std::int64_t local_epochs = 0;
  std::int64_t rounds = 0;
  std::string partition;
  bool quiet = false;
  std::int64_t max_restarts = 0;
  double restart_backoff = 1.0;
  std::string mpirun;
  std::int64_t min_workers = 0;
  std::int64_t max_workers = 0;
  double grow_after = 30.0;
  std::string grow_when;
  bool warm_standby = false;
  bool fork_server = false;
};

// The options only the supervisor reads, dropped from the child's command line.
constexpr const char* kSupervisorOptions[] = {"--max-restarts", "--restart-backoff", "--mpirun",
                                              "--min-workers",  "--max-workers",     "--grow-after",
                                              "--grow-when"};

// The flags (no value) only the supervisor reads.
constexpr const char* kSupervisorFlags[] = {"--warm-standby", "--fork-server"};

// `args` (argv as typed) without the supervisor's options and their values.
std::vector<std::string> without_supervisor_options(const std::vector<std::string>& args) {
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < args.size(); ++i) {
    bool dropped = false;
    for (const std::string flag : kSupervisorFlags) {
      dropped = dropped || args[i] == flag || args[i].rfind(flag + "=", 0) == 0;
    }
    for (const std::string option : kSupervisorOptions) {
      if (args[i] == option) {
        ++i;  // its value
        dropped = true;
      } else if (args[i].rfind(option + "=", 0) == 0) {
        dropped = true;
      }
      if (dropped) break;
    }
    if (!dropped) kept.push_back(args[i]);
  }
  return kept;
}

// Splits --mpirun's text on blanks ("-np 2 --hostfile hosts").
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char ch : text) {
    if (ch == ' ' || ch == '\t') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += ch;
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

// The index of the process count in mpirun's arguments (the word after -np, -n or --np), or -1.
int np_index(const std::vector<std::string>& words) {
  for (std::size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "-np" || words[i] == "-n" || words[i] == "--np") {
      return static_cast<int>(i + 1);
    }
  }
  return -1;
}

// `dtrain train --max-restarts N`: this process supervises the run (train/supervisor.h), which
// runs as a child `dtrain train` (under `mpirun ARGS` with --mpirun) writing to `run_dir`.
// Elastic membership (--min-workers, --max-workers): the workers are the ranks as threads, or
// with --mpirun the processes (-np). A restart after a failure that lost a worker (an error
// naming a rank; under mpirun any failure: a process died) runs on one fewer, down to
// --min-workers; after --grow-after seconds on fewer than --max-workers the supervisor stops the
// run (it checkpoints) and restarts it on one more. The checkpoint is resharded each time.
int supervise_training(const TrainFlags& flags, const std::string& run_dir,
                       const train::Config& config) {
  const std::int64_t config_workers = config.parallel.workers;
  if (comm::launched_by_mpirun()) {
    throw ConfigError(
        "--max-restarts supervises the whole job and restarts mpirun itself, so it runs outside "
        "mpirun: `dtrain train --max-restarts N --mpirun \"-np 2 ...\" --config ...`");
  }
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> launcher;
  if (!flags.mpirun.empty()) {
    launcher = split_words(flags.mpirun);
    launcher.insert(launcher.begin(), "mpirun");
  }
  const bool elastic = flags.min_workers > 0 || flags.max_workers > 0;
  const int np_at = np_index(launcher);
  std::int64_t initial = config_workers;
  if (!launcher.empty() && elastic) {
    if (np_at < 0) {
      throw ConfigError(fmt::format(
          "--min-workers / --max-workers with --mpirun \"{}\" count processes: give -np N",
          flags.mpirun));
    }
    const std::string& np = launcher[static_cast<std::size_t>(np_at)];
    if (np.empty() || np.size() > 6 || np.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(np) < 1) {
      throw ConfigError(
          fmt::format("--mpirun \"{}\": the process count after -np must be a "
                      "number >= 1, got '{}'",
                      flags.mpirun, np));
    }
    initial = std::stoll(np);
  }
  const std::int64_t min_workers = flags.min_workers > 0 ? flags.min_workers : initial;
  const std::int64_t max_workers = flags.max_workers > 0 ? flags.max_workers : initial;
  if (elastic && (min_workers > initial || max_workers < initial)) {
    throw ConfigError(
        fmt::format("--min-workers {} and --max-workers {} must bracket the {} the run starts with",
                    min_workers, max_workers, initial));
  }
  auto workers = std::make_shared<std::int64_t>(initial);
  train::SupervisorOptions options;
  options.run_dir = run_dir;
  options.max_restarts = static_cast<int>(flags.max_restarts);
  options.backoff_seconds = flags.restart_backoff;
  std::vector<std::string> args = without_supervisor_options(command_line());
  args.erase(args.begin());  // argv[0]
  if (flags.resume.empty() && flags.out.empty()) {
    args.push_back("--out");
    args.push_back(run_dir);
  }
  options.first_command = launcher;
  options.first_command.push_back(self);
  options.first_command.insert(options.first_command.end(), args.begin(), args.end());
  const std::vector<std::string> first = options.first_command;
  options.restart_command = [=, quiet = flags.quiet](int, int failed_rank) {
    if (elastic) {
      const bool lost =
          failed_rank >= 0 || (!launcher.empty() && failed_rank != train::kGrowRestart);
      if (failed_rank == train::kGrowRestart && *workers < max_workers) ++*workers;
      if (lost && *workers > min_workers) --*workers;
    }
    // Before its resolved.toml exists the run has nothing to resume: start it as it was started
    // (with the workers it started with).
    if (!fs::exists(fs::path(run_dir) / "resolved.toml")) {
      *workers = initial;
      return first;
    }
    std::vector<std::string> command = launcher;
    if (elastic && np_at >= 0) command[static_cast<std::size_t>(np_at)] = std::to_string(*workers);
    command.insert(command.end(), {self, "train", "--resume", run_dir});
    if (elastic && launcher.empty()) {
      command.insert(command.end(), {"--workers", std::to_string(*workers)});
    }
    if (quiet) command.push_back("--quiet");
    return command;
  };
  if (!flags.grow_when.empty() && !elastic) {
    throw ConfigError(
        "--grow-when asks whether a worker is available before an elastic job grows back: give "
        "--min-workers / --max-workers with it");
  }
  if (elastic) {
    // Who is asked before a grow (train/grow_probe.h): the user's command, or mpirun itself.
    std::vector<std::string> probe;
    if (!flags.grow_when.empty()) {
      probe = {"/bin/sh", "-c", flags.grow_when};
    } else if (!launcher.empty()) {
      probe = launcher;
      probe.push_back("true");
    }
    const std::string probe_log = (fs::path(run_dir) / "grow_probe.log").string();
    auto last_asked = std::make_shared<std::optional<std::chrono::steady_clock::time_point>>();
    const double every = flags.grow_after;
    // The last "no" said, so that a repeated answer is logged once, not every --grow-after.
    auto last_no = std::make_shared<std::string>();
    options.can_grow = [=] {
      if (*workers >= max_workers) return false;
      if (probe.empty()) return true;  // one machine, no one to ask: --grow-after alone
      const auto now = std::chrono::steady_clock::now();
      if (last_asked->has_value() &&
          std::chrono::duration<double>(now - **last_asked).count() < std::max(every, 0.1)) {
        return false;
      }
      *last_asked = now;
      std::vector<std::string> command = probe;
      if (flags.grow_when.empty() && np_at >= 0) {
        command[static_cast<std::size_t>(np_at)] = std::to_string(*workers + 1);
      }
      const train::GrowAnswer answer =
          train::ask_grow_probe(command, *workers + 1, probe_log, std::chrono::seconds(10));
      if (answer.available) {
        last_no->clear();
      } else if (answer.why != *last_no) {
        *last_no = answer.why;
        log::info(
            "supervisor: not growing to {} workers yet: `{}` said no ({}; its output in {}); "
            "asking again every {:.3g} s",
            *workers + 1,
            flags.grow_when.empty() ? fmt::format("{}", fmt::join(command, " ")) : flags.grow_when,
            answer.why, probe_log, every);
      }
      return answer.available;
    };
    options.grow_after_seconds = flags.grow_after;
  }
  options.child_is_launcher = !launcher.empty();
  if (launcher.empty()) {
    // The ranks are threads of the child: a stopped child (SIGSTOP) fires none of their deadlines,
    // so the supervisor ends it past the same deadline. Under mpirun the other processes' do.
    if (config.parallel.comm_timeout_seconds > 0) {
      options.stopped_limit_seconds = config.parallel.comm_timeout_seconds;
      options.stopped_limit_name =
          fmt::format("parallel.comm_timeout_seconds = {:g}", config.parallel.comm_timeout_seconds);
    } else {
      options.stopped_limit_seconds =
          std::chrono::duration<double>(comm::default_comm_timeout()).count();
      options.stopped_limit_name =
          fmt::format("the communication deadline of {:g} s (parallel.comm_timeout_seconds)",
                      options.stopped_limit_seconds);
    }
  }
  if (flags.warm_standby) {
    if (elastic || !launcher.empty()) {
      throw ConfigError(
          "--warm-standby keeps one `dtrain train --resume` process ready beside the run; it "
          "cannot be combined with --min-workers / --max-workers (a restart's command depends on "
          "the failure) or --mpirun (the job's processes are mpirun's)");
    }
    options.warm_standby = true;
  }
  if (flags.fork_server) {
    if (elastic || !launcher.empty() || flags.warm_standby) {
      throw ConfigError(
          "--fork-server forks each restart from one template process of the run; it cannot be "
          "combined with --min-workers / --max-workers (a restart's command depends on the "
          "failure), --mpirun (the job's processes are mpirun's) or --warm-standby (one way to "
          "have a process ready is enough)");
    }
    options.fork_server = true;
  }
  return train::supervise(options);
}

constexpr const char* kTrainHelp = R"(Trains a model from a TOML config and writes a run folder.

Every setting has a default; a config file names only what it changes, and --set overrides any key
of it (value typed as the key: numbers, true/false, [256, 256], strings). `dtrain config` prints
every key with its meaning and accepted values.)";

constexpr const char* kTrainFooter = R"(
Examples:
  dtrain train --config examples/fashion_mlp.toml
  dtrain train --config examples/fashion_mlp.toml --set optim.lr=0.05 --epochs 2 --out runs/lr005
  dtrain train --resume runs/lr005 --epochs 4        # continue a run to 4 epochs
  dtrain train --resume runs/lr005 --workers 4       # continue it on 4 ranks (resharded)
  dtrain train --config examples/fashion_mlp.toml --max-restarts 3 \
               --set train.checkpoint_every_steps=100
                                                     # restart from the newest good checkpoint
                                                     # when the run dies, up to 3 times
  dtrain train --config examples/fashion_mlp.toml --workers 2 --allreduce ring
                                                     # data parallel: 2 ranks as threads
  dtrain train --config examples/fashion_mlp.toml --workers 2 --no-overlap --bucket-bytes 0
  dtrain train --config examples/fashion_mlp.toml --workers 2 --zero-stage 1
                                                     # ZeRO-1: each rank updates half the model
  dtrain train --config examples/fashion_mlp.toml --workers 2 --compression topk:0.01
                                                     # send 1% of each gradient bucket
  dtrain train --config examples/fashion_mlp.toml --workers 8 --aggregator median \
               --attack alie --byzantine 2          # robust to 2 attacking ranks
  dtrain train --config examples/hogwild_sparse.toml --strategy hogwild --workers 2
                                                     # Hogwild!: 2 threads, no locks
  dtrain train --config examples/fashion_mlp.toml --strategy parameter_server --consistency async \
               --servers 2 --workers 6               # Downpour: 6 workers, 2 parameter servers
  dtrain train --config examples/fashion_mlp.toml --strategy parameter_server --workers 4 \
               --backup-workers 1 --straggler rank=2,slowdown=5
                                                     # sync SGD using the first 3 of 4 gradients
  dtrain train --config examples/fashion_mlp.toml --strategy local_sgd --period 4 --workers 2
                                                     # local SGD: average every 4 steps
  dtrain train --config examples/fashion_mlp.toml --strategy decentralized \
               --topology one-peer-exponential --workers 8
                                                     # D-PSGD: one neighbour per step
  dtrain train --config examples/fashion_mlp_federated.toml --partition dirichlet:0.1 \
               --local-epochs 5 --workers 2          # FedAvg: 100 clients, 10 per round
  dtrain train --config examples/fortunes_gpt.toml --tp 2
                                                     # tensor parallel: each GPT block split in 2
  dtrain train --config examples/fashion_mlp.toml --dp 2 --pp 2
                                                     # grid: 2 pipelines of 2 stages on 4 ranks
  dtrain train --config examples/synthetic_spatial.toml --dp 2 --sp 2
                                                     # grid: 2 replicas, each image's rows split
                                                     # over 2 ranks

Each strategy reads its own config section ([data_parallel], [parameter_server], [local_sgd]);
`dtrain config` lists them. Data parallelism: train.batch_size is the global batch, split over the ranks; gradients are
averaged with the chosen allreduce in buckets of --bucket-bytes, overlapped with backward when
every rank's compute threads and communication thread have CPUs of their own (--overlap).
train.threads is the compute threads of each rank. See docs/PARALLEL.md.

Parameter servers (--strategy parameter_server, docs/PS.md): --servers ranks hold the parameters,
key ranges balanced by size, and apply the optimizer; --workers ranks compute gradients.
--consistency bsp is synchronous (the same update as data_parallel), async applies each gradient as it arrives (workers
pull every --pull-every steps), ssp lets a worker run at most --staleness steps ahead of the
slowest. Under mpirun the job's last --servers ranks serve; --colocate-servers puts the servers on
the first workers instead (a rank is then both).

Local SGD (--strategy local_sgd, docs/LOCAL_SGD.md): each rank takes --period steps on its own
replica, then the replicas average their parameters: 1/H of synchronous training's traffic.

Outputs (in --out, default runs/<config name>-<YYYYmmdd-HHMMSS>):
  resolved.toml            the full configuration, defaults included (re-run with --config)
  metrics.jsonl            one JSON object per logged step, evaluation and epoch
  summary.json             final/best test accuracy, time to each accuracy target, samples/s
                           (data parallel: per-rank compute/communication/waiting, bytes)
  trace.json               Chrome trace of the first parallel.trace_steps steps (Perfetto)
  checkpoints/epoch-N.ckpt checkpoints (train.checkpoint_every), checkpoints/latest names the newest
  checkpoints/epoch-N-step-S.ckpt  checkpoints inside an epoch (train.checkpoint_every_steps,
                           checkpoint_every_seconds, mtbf_hours; and on SIGTERM / SIGINT)
  restarts.jsonl           --max-restarts: one line per restart (cause, rank, steps lost)

SIGTERM, SIGINT (Ctrl-C) or SIGHUP (the terminal closed) saves a checkpoint after the current step
and stops (a second one stops at once); `--resume` continues from it. See docs/FAULTS.md.

Exit codes: 0 success, 1 bad command line, 2 bad input (config, data, checkpoint), 3 internal error,
4 a rank failed or a deadline passed (--max-restarts restarts on 3, 4 and deaths by a signal),
128 + signal: stopped by SIGTERM (143), SIGINT (130) or SIGHUP (129) after saving a checkpoint.)";

// --compression sets the strategy's own key: parameter_server.compression under parallel.strategy
// = "parameter_server" (from --strategy, or else the config file with its --set overrides),
// local_sgd.compression, decentralized.compression, federated.compression likewise,
// data_parallel.compression otherwise.
std::string compression_key(const TrainFlags& flags) {
  std::string strategy = flags.strategy;
  if (strategy.empty() && flags.resume.empty()) {
    try {
      strategy = train::load_config(flags.config, flags.sets).parallel.strategy;
    } catch (const ConfigError&) {
      // The --set keys may only validate together with the key this flag sets (compression and
      // data_parallel.momentum_correction): the strategy is then the file's, or a --set's; the
      // full load later says what is wrong, if anything is.
      train::Config file_only = train::load_config(flags.config, {});
      for (const std::string& set : flags.sets) {
        if (set.rfind("parallel.strategy", 0) == 0) train::apply_override(file_only, set);
      }
      strategy = file_only.parallel.strategy;
    }
  }
  return train::compression_key_for(strategy);
}

int run_train(const TrainFlags& flags) {
  std::vector<std::string> overrides = flags.sets;
  if (flags.epochs > 0) overrides.push_back(fmt::format("train.epochs={}", flags.epochs));
  if (flags.threads > 0) overrides.push_back(fmt::format("train.threads={}", flags.threads));
  if (flags.workers > 0) overrides.push_back(fmt::format("parallel.workers={}", flags.workers));
  // The grid: --dp or --pp, or two model-parallel axes (--sp with --tp, refused there by name).
  const bool grid = flags.dp > 0 || flags.pp > 0 || (flags.sp > 0 && flags.tp > 0);
  if (grid && flags.strategy == "spatial" && flags.sp <= 0) {
    throw ConfigError(fmt::format(
        "--strategy spatial with --dp {} --tp {} --pp {}: on the grid the spatial groups' size "
        "is --sp S; give --dp D --sp S for D replicas of S ranks each (docs/HYBRID.md)",
        std::max<std::int64_t>(flags.dp, 1), std::max<std::int64_t>(flags.tp, 1),
        std::max<std::int64_t>(flags.pp, 1)));
  }
  // --sp S and --tp T alone choose their strategy; another --strategy would drop them unsaid.
  for (const auto& [flag, value, own] :
       {std::tuple{"--sp", flags.sp, "spatial"}, std::tuple{"--tp", flags.tp, "tensor_parallel"}}) {
    if (!grid && value > 0 && !flags.strategy.empty() && flags.strategy != own) {
      throw ConfigError(fmt::format(
          "{} {} with --strategy {}: {} alone runs --strategy {}; drop one of the two, or give "
          "--dp D to put {} inside data parallelism (docs/HYBRID.md)",
          flag, value, flags.strategy, flag, own, flag));
    }
  }
  if (grid) {
    // --dp D --pp P (--tp T, --sp S): the process grid (strategies/hybrid/, docs/HYBRID.md); as
    // threads the grid sets the ranks (--workers, when given, must agree), under mpirun -np does.
    const std::int64_t dp = std::max<std::int64_t>(flags.dp, 1);
    const std::int64_t tp = std::max<std::int64_t>(flags.tp, 1);
    const std::int64_t pp = std::max<std::int64_t>(flags.pp, 1);
    const std::int64_t sp = std::max<std::int64_t>(flags.sp, 1);
    overrides.push_back(std::string("parallel.strategy=\"hybrid\""));
    overrides.push_back(fmt::format("hybrid.dp={}", dp));
    overrides.push_back(fmt::format("hybrid.tp={}", tp));
    overrides.push_back(fmt::format("hybrid.pp={}", pp));
    overrides.push_back(fmt::format("hybrid.sp={}", sp));
    if (flags.workers <= 0 && !comm::launched_by_mpirun()) {
      overrides.push_back(fmt::format("parallel.workers={}", dp * tp * pp * sp));
    }
  } else if (flags.sp > 0) {
    // --sp S: spatial parallelism over S ranks (the whole run is one spatial group); under
    // mpirun -np sets the ranks.
    if (flags.workers > 0 && flags.workers != flags.sp) {
      throw ConfigError(fmt::format(
          "--sp {} with --workers {}: --sp S alone splits the rows over S ranks; drop --workers, "
          "or give --dp D for D replicas of S ranks each (docs/HYBRID.md)",
          flags.sp, flags.workers));
    }
    overrides.push_back(std::string("parallel.strategy=\"spatial\""));
    if (flags.workers <= 0 && !comm::launched_by_mpirun()) {
      overrides.push_back(fmt::format("parallel.workers={}", flags.sp));
    }
  } else if (flags.tp > 0) {
    // --tp P: tensor parallelism over P ranks (the whole run is one tensor-parallel group).
    overrides.push_back(std::string("parallel.strategy=\"tensor_parallel\""));
    overrides.push_back(fmt::format("parallel.workers={}", flags.tp));
  }
  // On the grid, --strategy spatial names its spatial axis (--sp), not a run of its own.
  if (!flags.strategy.empty() && !(grid && flags.strategy == "spatial")) {
    overrides.push_back(fmt::format("parallel.strategy=\"{}\"", flags.strategy));
  }
  if (!flags.allreduce.empty()) {
    overrides.push_back(fmt::format("parallel.allreduce=\"{}\"", flags.allreduce));
  }
  if (!flags.bucket_bytes.empty()) {
    // "auto" as a TOML string; a count as a TOML integer (Config checks it).
    overrides.push_back(flags.bucket_bytes == "auto"
                            ? std::string("data_parallel.bucket_bytes=\"auto\"")
                            : "data_parallel.bucket_bytes=" + flags.bucket_bytes);
  }
  if (!flags.overlap.empty()) overrides.push_back("data_parallel.overlap=" + flags.overlap);
  if (flags.no_overlap) overrides.push_back("data_parallel.overlap=false");
  if (!flags.zero_stage.empty()) {
    overrides.push_back(fmt::format("data_parallel.zero_stage=\"{}\"", flags.zero_stage));
  }
  if (!flags.sum_in_update.empty()) {
    overrides.push_back(fmt::format("data_parallel.sum_in_update=\"{}\"", flags.sum_in_update));
  }
  if (flags.sync_bn) overrides.push_back("data_parallel.sync_batch_norm=true");
  if (!flags.compression.empty()) {
    overrides.push_back(fmt::format("{}=\"{}\"", compression_key(flags), flags.compression));
  }
  if (!flags.aggregator.empty()) {
    overrides.push_back(fmt::format("data_parallel.aggregator=\"{}\"", flags.aggregator));
  }
  if (!flags.attack.empty()) {
    overrides.push_back(fmt::format("data_parallel.attack=\"{}\"", flags.attack));
  }
  if (flags.byzantine >= 0) {
    overrides.push_back(fmt::format("data_parallel.byzantine={}", flags.byzantine));
  }
  if (flags.period > 0) overrides.push_back(fmt::format("local_sgd.period={}", flags.period));
  if (flags.micro_batches > 0) {
    overrides.push_back(fmt::format("pipeline.micro_batches={}", flags.micro_batches));
  }
  if (!flags.schedule.empty()) {
    overrides.push_back(fmt::format("pipeline.schedule=\"{}\"", flags.schedule));
  }
  if (!flags.topology.empty()) {
    overrides.push_back(fmt::format("decentralized.topology=\"{}\"", flags.topology));
  }
  if (flags.clients > 0) overrides.push_back(fmt::format("federated.clients={}", flags.clients));
  // Passed on even when out of range, so that the config's check names the key and the value.
  if (flags.client_fraction) {
    overrides.push_back(fmt::format("federated.client_fraction={}", *flags.client_fraction));
  }
  if (flags.local_epochs > 0) {
    overrides.push_back(fmt::format("federated.local_epochs={}", flags.local_epochs));
  }
  if (flags.rounds > 0) overrides.push_back(fmt::format("federated.rounds={}", flags.rounds));
  if (!flags.partition.empty()) {
    overrides.push_back(fmt::format("federated.partition=\"{}\"", flags.partition));
  }
  if (!flags.straggler.empty()) {
    overrides.push_back(fmt::format("parallel.straggler=\"{}\"", flags.straggler));
  }
  if (flags.servers > 0)
    overrides.push_back(fmt::format("parameter_server.servers={}", flags.servers));
  if (flags.colocate_servers) overrides.push_back("parameter_server.colocate_servers=true");
  if (!flags.consistency.empty()) {
    overrides.push_back(fmt::format("parameter_server.consistency=\"{}\"", flags.consistency));
  }
  if (flags.staleness >= 0) {
    overrides.push_back(fmt::format("parameter_server.staleness={}", flags.staleness));
  }
  if (flags.pull_every > 0) {
    overrides.push_back(fmt::format("parameter_server.pull_every={}", flags.pull_every));
  }
  if (flags.backup_workers >= 0) {
    overrides.push_back(fmt::format("parameter_server.backup_workers={}", flags.backup_workers));
  }

  // A shortcut flag (--epochs) and a --set of the same key (train.epochs) would leave one of them
  // silently ignored: refuse the pair, naming both.
  const auto key_of = [](const std::string& assignment) {
    std::string key = assignment.substr(0, assignment.find('='));
    key.erase(0, key.find_first_not_of(' '));
    key.erase(key.find_last_not_of(' ') + 1);
    return key;
  };
  for (std::size_t i = flags.sets.size(); i < overrides.size(); ++i) {
    for (const std::string& set : flags.sets) {
      if (train::canonical_key(key_of(set)) == key_of(overrides[i])) {
        throw ConfigError(
            fmt::format("--set {} and a shortcut flag giving {} both set {}; give one of them", set,
                        overrides[i], key_of(set)));
      }
    }
  }

  train::Config config;
  train::TrainerOptions options;
  options.quiet = flags.quiet;
  if (!flags.resume.empty()) {
    // A resumed run must be the run its checkpoint belongs to; only its length may change.
    // The number of ranks may change too: the checkpoint is resharded where the strategy allows
    // (docs/FAULTS.md), or the trainer refuses naming both counts.
    for (const auto& assignment : overrides) {
      if (assignment.rfind("train.epochs=", 0) != 0 &&
          assignment.rfind("parallel.workers=", 0) != 0 &&
          assignment.rfind("parameter_server.servers=", 0) != 0 &&
          assignment.rfind("federated.rounds=", 0) != 0) {
        throw ConfigError(fmt::format(
            "--resume {} continues the run of its resolved.toml; only train.epochs (--epochs), "
            "federated.rounds (--rounds), parallel.workers (--workers) and "
            "parameter_server.servers (--servers) may change, but '{}' was given; start a new run "
            "with --config {}/resolved.toml to change other keys",
            flags.resume, assignment, flags.resume));
      }
    }
    const std::string resolved = (fs::path(flags.resume) / "resolved.toml").string();
    if (!fs::exists(resolved)) {
      throw ConfigError(fmt::format(
          "--resume {}: {} is missing; pass the folder of an earlier `dtrain train` run",
          flags.resume, resolved));
    }
    config = train::load_config(resolved, overrides);
    options.run_dir = flags.resume;
    options.resume = true;
  } else {
    config = train::load_config(flags.config, overrides);
    options.run_dir = flags.out.empty() ? default_out_dir(flags.config) : flags.out;
  }
  if (flags.max_restarts > 0) {
    return supervise_training(flags, options.run_dir, config);
  }
  if (flags.min_workers > 0 || flags.max_workers > 0) {
    throw ConfigError(
        "--min-workers / --max-workers are the supervisor's: give --max-restarts N "
        "with them");
  }
  if (flags.warm_standby) {
    throw ConfigError("--warm-standby is the supervisor's: give --max-restarts N with it");
  }
  if (flags.fork_server) {
    throw ConfigError("--fork-server is the supervisor's: give --max-restarts N with it");
  }
  if (!flags.mpirun.empty()) {
    throw ConfigError(
        "--mpirun names the launcher a supervised run restarts; give --max-restarts "
        "N with it");
  }
  install_stop_handlers();
  // A first Ctrl-C is heard at once, also while a rank is stuck in a wait (the run itself reads it
  // at its next step boundary). Said by the process that trains: not a warm standby or a fork
  // server's template (which end silently), and under mpirun by process 0 alone.
  if (!train::is_standby() && !train::is_fork_template() && comm::launcher_rank() == 0) {
    set_sigint_note(
        isatty(STDERR_FILENO) != 0
            ? "\nSIGINT: stopping after the current step (a checkpoint first, where the "
              "strategy keeps one); Ctrl-C again to end at once\n"
            : "SIGINT: stopping after the current step (a checkpoint first, where the "
              "strategy keeps one); Ctrl-C again to end at once\n");
  }
  const train::RunSummary summary = [&] {
    try {
      return train::run_training(config, options);
    } catch (...) {
      // A failed run keeps its memory checkpoint for --resume: say where it is and how to free it
      // (once per job: rank 0; a supervised child's supervisor says it when it gives up).
      if (!env::get("DTRAIN_ERROR_FILE") && comm::launcher_rank() == 0) {
        try {
          const std::string note = train::memory_checkpoint_note(options.run_dir);
          if (!note.empty()) log::warn("{}", note);
        } catch (const std::exception&) {
          // The error being thrown is the one to report.
        }
      }
      throw;
    }
  }();
  // A stop asked for by SIGTERM / SIGINT: exit as a process killed by it would, after the
  // checkpoint (a scheduler or the supervisor then knows the run is incomplete).
  return summary.stopped_by_signal != 0 ? 128 + summary.stopped_by_signal : 0;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* sub = app.add_subcommand("train", kTrainHelp);
  sub->footer(kTrainFooter);
  auto* config = sub->add_option("--config,-c", flags->config, "TOML config file to train from")
                     ->check(non_empty_path());
  sub->add_option("--set,-s", flags->sets,
                  "override one config key, e.g. --set optim.lr=0.05 (repeatable)")
      ->type_name("KEY=VALUE");
  auto* out = sub->add_option("--out,-o", flags->out,
                              "run folder to write (default runs/<config name>-<time>)")
                  ->check(non_empty_path());
  auto* resume = sub->add_option("--resume", flags->resume,
                                 "continue the run in this folder from its latest checkpoint")
                     ->check(non_empty_path());
  sub->add_option("--epochs", flags->epochs, "shortcut for --set train.epochs=N")
      ->check(at_least(1));
  sub->add_option("--threads", flags->threads, "shortcut for --set train.threads=N")
      ->check(at_least(1));
  sub->add_option("--workers,-w", flags->workers,
                  "data-parallel ranks as threads (shortcut for --set parallel.workers=N)")
      ->check(at_least(1));
  std::string strategies = "how the workers share the model (parallel.strategy):";
  for (const train::StrategyInfo& info : train::strategy_registry()) {
    strategies += fmt::format("\n  {:<16} {} ({})", info.name, info.summary, info.docs);
  }
  strategies += "\n  (the old names allreduce and ps still work, with a warning)";
  sub->add_option("--strategy", flags->strategy, strategies)->type_name("NAME");
  sub->add_option(
      "--allreduce", flags->allreduce,
      "gradient allreduce algorithm (ring, tree, halving-doubling, ...; `dtrain config` "
      "lists them)");
  sub->add_option("--bucket-bytes,--fusion-bytes", flags->bucket_bytes,
                  "data_parallel: gradient bucket size in bytes (data_parallel.bucket_bytes); 0 = "
                  "one allreduce per tensor; auto (default): 1 MiB buckets when overlapping, else "
                  "one bucket")
      ->check(CLI::Validator(
          [](const std::string& text) {
            const bool count = !text.empty() && text.size() <= 18 &&
                               text.find_first_not_of("0123456789") == std::string::npos;
            return text == "auto" || count
                       ? std::string()
                       : "'" + text + "' is neither auto nor a byte count such as 0 or 1048576";
          },
          "auto|BYTES"));
  auto* overlap =
      sub->add_option("--overlap", flags->overlap,
                      "data_parallel: allreduce gradient buckets during backward: auto (default: "
                      "only when each "
                      "rank's compute threads and communication thread fit on the CPUs), true, "
                      "false")
          ->check(CLI::IsMember({"auto", "true", "false"}));
  sub->add_flag("--no-overlap", flags->no_overlap,
                "the same as --overlap false: allreduce the gradients after backward")
      ->excludes(overlap);
  sub->add_option("--zero-stage", flags->zero_stage,
                  "data_parallel: 1 shards the optimizer over the ranks (ZeRO-1: reduce-scatter "
                  "the gradients, "
                  "each rank updates 1/P of the parameters and keeps 1/P of the optimizer state, "
                  "allgather the parameters); 0: every rank updates everything (as DDP); auto "
                  "(default): 1 with more than one rank, --allreduce ring and sgd/adam/adamw")
      ->check(CLI::IsMember({"auto", "0", "1"}));
  sub->add_option(
         "--sum-in-update,--fused-update", flags->sum_in_update,
         "data_parallel, with the optimizer sharded and ranks as threads: true sums each shard's "
         "gradients over the ranks inside the update (read in place, no reduce-scatter); "
         "false reduce-scatters first; auto (default): true where it applies (sgd, adam "
         "or adamw, no overlap)")
      ->check(CLI::IsMember({"auto", "true", "false"}));
  sub->add_option("--compression", flags->compression,
                  "data_parallel: compress each gradient bucket (data_parallel.compression): "
                  "none, fp16, bf16, sign, qsgd:BITS, topk:RATIO|K, randomk:RATIO|K, "
                  "powersgd:RANK (docs/COMPRESSION.md); parameter_server: compress each "
                  "worker's push (parameter_server.compression; all but powersgd, docs/PS.md); "
                  "local_sgd: each average's model delta; decentralized: CHOCO-SGD's gossip; "
                  "federated: each client's upload (all but powersgd); other strategies refuse it")
      ->type_name("CODEC");
  sub->add_option("--aggregator", flags->aggregator,
                  "data_parallel: combine the ranks' gradients robustly "
                  "(data_parallel.aggregator): mean (default, the plain allreduce), median, "
                  "trimmed:BETA, krum, multikrum[:M], cclip[:TAU|auto[:L]], bucket:S,AGG "
                  "(docs/ROBUST.md)")
      ->type_name("SPEC");
  sub->add_option("--attack", flags->attack,
                  "data_parallel, experiments: what the last --byzantine ranks do "
                  "(data_parallel.attack): none, labelflip, signflip[:C], scale:C, noise:SIGMA, "
                  "alie[:Z], ipm[:EPS]")
      ->type_name("SPEC");
  sub->add_option("--byzantine", flags->byzantine,
                  "data_parallel: f, the number of Byzantine ranks (the last f), for --attack and "
                  "Krum (data_parallel.byzantine)")
      ->check(at_least(0));
  sub->add_flag("--sync-bn", flags->sync_bn, "data_parallel: batch-norm statistics over all ranks");
  sub->add_option("--straggler", flags->straggler,
                  "inject slowness for experiments: rank=R,slowdown=S, rank=R,delay_ms=D or "
                  "random=exp|pareto,mean_ms=M[,alpha=A]")
      ->type_name("SPEC");
  sub->add_option("--servers", flags->servers,
                  "--strategy parameter_server: server ranks (parameter_server.servers)")
      ->check(at_least(1));
  sub->add_flag("--colocate-servers", flags->colocate_servers,
                "--strategy parameter_server: run the servers on workers 0 .. S-1 (a second thread "
                "each) instead "
                "of on ranks of their own");
  sub->add_option("--consistency", flags->consistency,
                  "--strategy parameter_server: bsp (synchronous), async (Downpour) or ssp "
                  "(bounded staleness)");
  sub->add_option("--staleness", flags->staleness,
                  "--consistency ssp: steps a worker may run ahead of the slowest")
      ->check(at_least(0));
  sub->add_option("--pull-every", flags->pull_every,
                  "--consistency async: pull the parameters every N steps")
      ->check(at_least(1));
  sub->add_option(
         "--backup-workers", flags->backup_workers,
         "--strategy parameter_server --consistency bsp: each step uses the first workers - N "
         "gradients and drops the late ones")
      ->check(at_least(0));
  sub->add_option("--period", flags->period,
                  "--strategy local_sgd: local steps between parameter averages (local_sgd.period)")
      ->check(at_least(1));
  sub->add_option("--micro-batches", flags->micro_batches,
                  "--strategy pipeline: micro-batches per step (pipeline.micro_batches)")
      ->check(at_least(1));
  sub->add_option("--schedule", flags->schedule,
                  "--strategy pipeline: gpipe, 1f1b or pipedream (pipeline.schedule)");
  sub->add_option("--tp", flags->tp,
                  "tensor parallelism over P ranks: --strategy tensor_parallel --workers P "
                  "(gpt, mlp, layer lists; docs/TENSOR_PARALLEL.md); with --dp or --pp the grid's "
                  "tensor groups (hybrid.tp)")
      ->check(at_least(1));
  sub->add_option("--dp", flags->dp,
                  "process grid: D data-parallel replicas around --pp, --tp or --sp (--strategy "
                  "hybrid, hybrid.dp); dp x sp x tp x pp must equal the ranks (docs/HYBRID.md)")
      ->check(at_least(1));
  sub->add_option("--pp", flags->pp,
                  "process grid: P pipeline stages per replica (hybrid.pp; [pipeline] "
                  "micro_batches, schedule); with --dp D on D x P ranks (docs/HYBRID.md)")
      ->check(at_least(1));
  sub->add_option(
         "--sp", flags->sp,
         "spatial parallelism over S ranks: --strategy spatial --workers S (each image's "
         "rows split; docs/SPATIAL.md); with --dp D the grid's spatial groups (hybrid.sp): "
         "D replicas of S ranks each, on D x S ranks (docs/HYBRID.md)")
      ->check(at_least(1));
  sub->add_option("--topology", flags->topology,
                  "--strategy decentralized: ring, torus, exponential, one-peer-exponential or "
                  "full (decentralized.topology)")
      ->type_name("NAME");
  sub->add_option("--clients", flags->clients,
                  "--strategy federated: simulated clients K (federated.clients)")
      ->check(at_least(1));
  sub->add_option("--client-fraction", flags->client_fraction,
                  "--strategy federated: fraction C in (0, 1] of the clients in each round "
                  "(federated.client_fraction)");
  sub->add_option("--local-epochs", flags->local_epochs,
                  "--strategy federated: epochs E each client trains per round "
                  "(federated.local_epochs)")
      ->check(at_least(1));
  sub->add_option("--rounds", flags->rounds,
                  "--strategy federated: communication rounds (federated.rounds)")
      ->check(at_least(1));
  sub->add_option("--partition", flags->partition,
                  "--strategy federated: iid, shards, shards:S or dirichlet:A "
                  "(federated.partition)")
      ->type_name("SPEC");
  sub->add_flag("--quiet,-q", flags->quiet, "no progress output (errors are still printed)");
  sub->add_option("--max-restarts", flags->max_restarts,
                  "supervise the run: when it dies (a killed process, a failed rank, a deadline) "
                  "restart it from its newest good checkpoint, up to N times; each restart is "
                  "logged in <run folder>/restarts.jsonl (docs/FAULTS.md)")
      ->check(at_least(1));
  sub->add_flag("--warm-standby", flags->warm_standby,
                "--max-restarts: keep one resuming process ready (data loaded, model built, "
                "asleep) beside the run, so that a restart wakes it instead of starting a new "
                "one (docs/FAULTS.md); not with --mpirun or elastic workers");
  sub->add_flag("--fork-server", flags->fork_server,
                "--max-restarts: keep one template process of the run (data loaded, model built "
                "and warmed up, asleep) and a worker forked from it, so that a restart wakes "
                "that worker instead of starting a process (docs/FAULTS.md); runs whose ranks are "
                "each a Trainer (one worker, or ranks as threads), not with --mpirun, elastic "
                "workers or --warm-standby");
  sub->add_option("--restart-backoff", flags->restart_backoff,
                  "--max-restarts: seconds before the first restart, doubling after each (at "
                  "most 30 s); default 1")
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_option("--mpirun", flags->mpirun,
                  "--max-restarts: run (and restart) the job as `mpirun ARGS dtrain train ...`, "
                  "e.g. --mpirun \"-np 2 --hostfile hosts\"")
      ->type_name("ARGS");
  sub->add_option("--min-workers", flags->min_workers,
                  "--max-restarts, elastic: after a failure that lost a worker, continue on the "
                  "survivors down to N workers (ranks as threads; with --mpirun, processes)")
      ->check(at_least(1));
  sub->add_option("--max-workers", flags->max_workers,
                  "--max-restarts, elastic: grow back up to N workers (default: the starting "
                  "count), one per --grow-after seconds of training")
      ->check(at_least(1));
  sub->add_option("--grow-after", flags->grow_after,
                  "--max-restarts, elastic: seconds on fewer than --max-workers before the run "
                  "is stopped at a checkpoint and restarted on one more worker (default 30); with "
                  "--grow-when or --mpirun, how often to ask whether one is available")
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--grow-when", flags->grow_when,
                  "--max-restarts, elastic: a shell command that says whether one more worker is "
                  "available (exit 0: yes; DTRAIN_GROW_TO holds the count after the grow; its "
                  "output in <run>/grow_probe.log), asked every --grow-after seconds before the "
                  "job grows back. Default with --mpirun: `mpirun <its options, -np N+1> true`; "
                  "otherwise the job grows after --grow-after seconds");
  resume->excludes(config)->excludes(out);
  sub->callback([flags, config, resume] {
    if (config->count() == 0 && resume->count() == 0) {
      throw CLI::RequiredError("one of --config FILE or --resume DIR");
    }
  });
  return Command{sub, [flags] { return run_train(*flags); }};
}

}  // namespace dtrain::apps
