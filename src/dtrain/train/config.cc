#include "dtrain/train/config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <variant>

#include "dtrain/aggregate/aggregator_spec.h"
#include "dtrain/aggregate/attack.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/topology.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/compress/codec_spec.h"
#include "dtrain/data/client_partition.h"
#include "dtrain/data/load.h"
#include "dtrain/train/fault_injection.h"
#include "dtrain/train/model_layers_config.h"
#include "dtrain/train/straggler.h"
#include "dtrain/train/strategy_registry.h"
#include "dtrain/train/toml_text.h"

namespace dtrain::train {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const char* const kSections[] = {
    "model",           "data",          "train",         "optim",
    "schedule",        "parallel",      "data_parallel", "parameter_server",
    "local_sgd",       "decentralized", "pipeline",      "federated",
    "tensor_parallel", "hybrid"};

// Keys that moved or were renamed: the old "section.key" still works and warns (Config::notes).
// Errors name a key as the user wrote it.
struct RenamedKey {
  const char* old_name;
  const char* new_name;
};
constexpr RenamedKey kRenamedKeys[] = {
    {"parallel.fusion_bytes", "data_parallel.bucket_bytes"},
    {"parallel.overlap", "data_parallel.overlap"},
    {"parallel.zero_stage", "data_parallel.zero_stage"},
    {"parallel.fused_update", "data_parallel.sum_in_update"},
    {"parallel.sync_batch_norm", "data_parallel.sync_batch_norm"},
    {"parallel.servers", "parameter_server.servers"},
    {"parallel.colocate_servers", "parameter_server.colocate_servers"},
    {"parallel.consistency", "parameter_server.consistency"},
    {"parallel.staleness", "parameter_server.staleness"},
    {"parallel.pull_every", "parameter_server.pull_every"},
    {"parallel.backup_workers", "parameter_server.backup_workers"},
};

// Old values of parallel.strategy: "allreduce" named a collective, not a way of training.
struct RenamedValue {
  const char* old_value;
  const char* new_value;
};
constexpr RenamedValue kRenamedStrategies[] = {
    {"allreduce", "data_parallel"},
    {"ps", "parameter_server"},
};

using Target = std::variant<std::string*, std::int64_t*, double*, bool*, std::vector<std::int64_t>*,
                            std::vector<double>*>;

// One accepted key: where its value lives in Config, what it means, and what it may hold. For
// numbers (and the elements of number lists) the range is [min, max] with either end optionally
// open; for strings a non-empty `choices` is the closed set of accepted values.
struct Field {
  const char* section;
  const char* key;
  Target target;
  const char* help;
  double min = -kInf;
  double max = kInf;
  bool min_open = false;
  bool max_open = false;
  std::vector<std::string> choices = {};
  // A string key whose value is "auto" or a count >= min (parallel.fusion_bytes): it also takes
  // TOML integers, and a count is written back unquoted.
  bool auto_or_count = false;

  std::string name() const { return std::string(section) + "." + key; }
};

Field int_at_least(const char* section, const char* key, std::int64_t* target, const char* help,
                   double min) {
  return Field{section, key, target, help, min};
}

// parallel.strategy's help: every strategy of the registry with its one-line summary.
const char* strategy_key_help() {
  static const std::string help = [] {
    std::string text = "how workers share the model (";
    for (const StrategyInfo& info : strategy_registry()) {
      text += fmt::format("{}: {}; ", info.name, info.summary);
    }
    text.resize(text.size() - 2);
    return text + ")";
  }();
  return help.c_str();
}

// The key table. Ranges are the ones every part below accepts; the optimizer, schedule and model
// builders check again, but catching a bad value here names the config key and the file.
std::vector<Field> fields(Config& c) {
  auto& m = c.model;
  auto& d = c.data;
  auto& t = c.train;
  auto& o = c.optim;
  auto& s = c.schedule;
  auto& p = c.parallel;
  auto& dp = c.data_parallel;
  auto& ps = c.parameter_server;
  auto& l = c.local_sgd;
  auto& dc = c.decentralized;
  auto& pl = c.pipeline;
  auto& fd = c.federated;
  auto& tp = c.tensor_parallel;
  auto& hy = c.hybrid;
  std::vector<std::string> topologies;
  for (const comm::TopologyKind kind : comm::topology_kinds()) {
    topologies.emplace_back(comm::topology_name(kind));
  }
  std::vector<std::string> strategies;
  for (const StrategyInfo& info : strategy_registry()) strategies.emplace_back(info.name);
  std::vector<std::string> algorithms;
  for (const auto& algorithm : comm::allreduce_algorithms()) {
    algorithms.emplace_back(algorithm.name);
  }
  return {
      {"model",
       "name",
       &m.name,
       "architecture (layers: the [[model.layer]] tables below, docs/MODELS.md; gpt: a "
       "byte-level transformer, data.dataset = \"text\" only; logistic, "
       "svm: sparse linear models, parallel.strategy = \"hogwild\" only)",
       -kInf,
       kInf,
       false,
       false,
       {"mlp", "lenet5", "resnet", "gpt", "layers", "logistic", "svm"}},
      {"model", "hidden", &m.hidden, "mlp: widths of the hidden layers", 1},
      {"model",
       "activation",
       &m.activation,
       "mlp: activation after each hidden layer",
       -kInf,
       kInf,
       false,
       false,
       {"relu", "sigmoid", "tanh", "softplus", "leaky_relu", "elu", "gelu"}},
      {"model", "activation_alpha", &m.activation_alpha, "leaky_relu slope / elu alpha", 0},
      {"model", "dropout", &m.dropout, "mlp: dropout probability after each hidden activation", 0,
       1, false, true},
      {"model",
       "init",
       &m.init,
       "weight initialisation (uniform: PyTorch's default, biases too; others: biases start at 0)",
       -kInf,
       kInf,
       false,
       false,
       {"he", "xavier", "normal", "uniform"}},
      {"model", "init_sigma", &m.init_sigma, "standard deviation of init = \"normal\"", 0, kInf,
       true},
      int_at_least("model", "resnet_width", &m.resnet_width,
                   "resnet: channels of the first stage (doubled per stage)", 1),
      int_at_least("model", "resnet_blocks", &m.resnet_blocks, "resnet: blocks per stage", 1),
      {"model", "gpt_layers", &m.gpt_layers, "gpt: transformer blocks", 1, 1024},
      {"model", "gpt_heads", &m.gpt_heads, "gpt: attention heads (a divisor of gpt_dim)", 1, 1024},
      {"model", "gpt_dim", &m.gpt_dim, "gpt: model width d (embeddings, residual stream)", 1,
       65536},

      {"data",
       "dataset",
       &d.dataset,
       "data set",
       -kInf,
       kInf,
       false,
       false,
       {"fashion-mnist", "mnist", "cifar10", "synthetic", "text", "libsvm", "sparse-synthetic"}},
      {"data", "path", &d.path,
       "folder holding the data set files (libsvm: the training file; text: a file or a folder of "
       "text files; not used by synthetic)"},
      {"data", "test_path", &d.test_path, "libsvm: the test file (\"\" = no test set)"},
      int_at_least("data", "sparse_features", &d.sparse_features,
                   "sparse-synthetic: features d (length of w*)", 1),
      int_at_least("data", "sparse_nonzeros", &d.sparse_nonzeros,
                   "sparse-synthetic: non-zero features per sample (<= sparse_features)", 1),
      {"data", "sparse_label_noise", &d.sparse_label_noise,
       "sparse-synthetic: probability that a label is flipped", 0, 0.5},
      int_at_least("data", "synthetic_samples", &d.synthetic_samples,
                   "synthetic, sparse-synthetic: training samples", 1),
      int_at_least("data", "synthetic_test_samples", &d.synthetic_test_samples,
                   "synthetic, sparse-synthetic: test samples", 1),
      {"data", "synthetic_classes", &d.synthetic_classes, "synthetic: classes", 2, 1000},
      {"data", "synthetic_shape", &d.synthetic_shape,
       "synthetic: one sample's shape (C, H, W), at most 65536 values", 1, 4096},
      {"data", "synthetic_noise", &d.synthetic_noise,
       "synthetic: standard deviation around the class means", 0},
      int_at_least("data", "synthetic_seed", &d.synthetic_seed,
                   "synthetic, sparse-synthetic: seed of the generated data; text: of the windows' "
                   "offsets",
                   0),
      {"data", "block", &d.block, "text: bytes of input per window (the model's context)", 1,
       65536},
      int_at_least("data", "text_windows", &d.text_windows,
                   "text: training windows (0 = the training split's bytes / block)", 0),
      int_at_least("data", "text_test_windows", &d.text_test_windows,
                   "text: held-out windows evaluated as the test set", 1),
      {"data", "text_holdout", &d.text_holdout,
       "text: the last fraction of the bytes held out for evaluation", 0, 1, true, true},
      int_at_least("data", "limit_train", &d.limit_train,
                   "use only the first N training samples (0 = all)", 0),
      int_at_least("data", "limit_test", &d.limit_test,
                   "use only the first N test samples (0 = all)", 0),

      {"train", "epochs", &t.epochs, "passes over the training set", 1, 100000},
      {"train", "batch_size", &t.batch_size, "samples per step", 1, 1 << 20},
      int_at_least("train", "seed", &t.seed,
                   "seed of initialisation, shuffling and dropout (same seed, same run)", 0),
      {"train", "threads", &t.threads, "compute threads for the kernels", 1, 256},
      {"train",
       "loss",
       &t.loss,
       "loss function (mse on one-hot targets)",
       -kInf,
       kInf,
       false,
       false,
       {"cross_entropy", "mse"}},
      int_at_least("train", "log_every", &t.log_every,
                   "steps between step records in metrics.jsonl", 1),
      int_at_least("train", "eval_every_steps", &t.eval_every_steps,
                   "steps between test evaluations (0 = at epoch ends only)", 0),
      {"train", "accuracy_targets", &t.accuracy_targets,
       "test accuracies whose time to reach summary.json reports", 0, 1, true, false},
      int_at_least("train", "checkpoint_every", &t.checkpoint_every,
                   "epochs between checkpoints (0 = only at the end)", 0),
      int_at_least("train", "keep_checkpoints", &t.keep_checkpoints,
                   "newest checkpoints kept (0 = all)", 0),
      int_at_least("train", "checkpoint_every_steps", &t.checkpoint_every_steps,
                   "steps between checkpoints inside an epoch as well (0 = off); written in the "
                   "background from an in-memory snapshot",
                   0),
      {"train", "checkpoint_every_seconds", &t.checkpoint_every_seconds,
       "seconds between checkpoints inside an epoch as well (0 = off, or Young/Daly with "
       "mtbf_hours)",
       0, kInf},
      {"train", "mtbf_hours", &t.mtbf_hours,
       "mean time between failures of the job; > 0 with checkpoint_every_seconds = 0 checkpoints "
       "every sqrt(2 x measured checkpoint cost x MTBF) seconds (Young/Daly)",
       0, kInf},
      int_at_least("train", "memory_checkpoint_every_steps", &t.memory_checkpoint_every_steps,
                   "steps between checkpoints in shared memory (0 = off): they outlive the "
                   "process, not the machine, and a restart resumes from them (tier 1)",
                   0),
      {"train", "memory_checkpoint_folder", &t.memory_checkpoint_folder,
       "folder (a tmpfs) of the memory checkpoints"},
      int_at_least("train", "in_process_restarts", &t.in_process_restarts,
                   "rank threads that fail (an error, a deadline) restart inside the process from "
                   "the newest checkpoint, up to this many times (0 = never; not under mpirun)",
                   0),
      {"train", "accumulate_steps", &t.accumulate_steps,
       "micro-batches per step whose gradients add up (same trajectory, less memory)", 1, 4096},

      {"optim",
       "name",
       &o.name,
       "optimizer",
       -kInf,
       kInf,
       false,
       false,
       {"sgd", "adam", "adamw", "lars", "onebit_adam"}},
      {"optim", "lr", &o.lr, "base learning rate (before scaling and schedule)", 0, kInf, true},
      {"optim", "momentum", &o.momentum, "sgd, lars: momentum", 0, 1, false, true},
      {"optim", "nesterov", &o.nesterov, "sgd: Nesterov momentum"},
      {"optim", "weight_decay", &o.weight_decay,
       "L2 penalty (adamw: decoupled); not applied to biases and norms", 0},
      {"optim", "beta1", &o.beta1, "adam, adamw: first-moment decay", 0, 1, false, true},
      {"optim", "beta2", &o.beta2, "adam, adamw: second-moment decay", 0, 1, false, true},
      {"optim", "eps", &o.eps, "adam, adamw: denominator epsilon", 0, kInf, true},
      {"optim", "trust_coefficient", &o.trust_coefficient, "lars: trust coefficient (eta)", 0, kInf,
       true},
      int_at_least("optim", "freeze_step", &o.freeze_step,
                   "onebit_adam: exact Adam steps before the variance freezes and the momentum "
                   "goes in 1 bit",
                   1),

      {"schedule",
       "decay",
       &s.decay,
       "learning-rate decay after warmup",
       -kInf,
       kInf,
       false,
       false,
       {"constant", "step", "cosine"}},
      int_at_least("schedule", "step_size", &s.step_size,
                   "step decay: steps between multiplications by gamma", 0),
      {"schedule", "gamma", &s.gamma, "step decay factor", 0, 1, true, false},
      {"schedule", "min_lr", &s.min_lr, "cosine: final learning rate", 0},
      {"schedule",
       "scaling",
       &s.scaling,
       "scale lr by k = batch_size / base_batch (linear: k, sqrt: sqrt(k))",
       -kInf,
       kInf,
       false,
       false,
       {"none", "linear", "sqrt"}},
      int_at_least("schedule", "base_batch", &s.base_batch, "the batch optim.lr was tuned for", 1),
      {"schedule",
       "warmup",
       &s.warmup,
       "warmup kind",
       -kInf,
       kInf,
       false,
       false,
       {"none", "constant", "gradual"}},
      int_at_least("schedule", "warmup_steps", &s.warmup_steps, "warmup length in steps", 0),
      int_at_least("schedule", "warmup_epochs", &s.warmup_epochs,
                   "warmup length in epochs (instead of warmup_steps)", 0),
      {"schedule", "warmup_factor", &s.warmup_factor, "constant warmup: lr = factor * peak", 0, 1,
       true, false},

      {"parallel", "strategy", &p.strategy, strategy_key_help(), -kInf, kInf, false, false,
       strategies},
      {"parallel", "workers", &p.workers,
       "ranks as threads of each process (x processes under mpirun); under parameter_server "
       "these are the workers, and the servers come on top",
       1, kMaxWorkers},
      {"parallel", "allreduce", &p.allreduce,
       "the allreduce algorithm of data_parallel's gradients and local_sgd's parameter averages",
       -kInf, kInf, false, false, algorithms},
      {"parallel", "stall_warning_seconds", &p.stall_warning_seconds,
       "warn when a gradient bucket has waited this long for other ranks", 0, kInf, true},
      {"parallel", "comm_timeout_seconds", &p.comm_timeout_seconds,
       "deadline of every communication wait (0 = DTRAIN_COMM_TIMEOUT_MS, else 60)", 0},
      int_at_least("parallel", "trace_steps", &p.trace_steps,
                   "steps recorded in trace.json (0 = no trace)", 0),
      {"parallel", "check_headers", &p.check_headers,
       "data_parallel, local_sgd: check each gradient (or parameter) allreduce's arguments "
       "across ranks (a round trip through rank 0; layouts are compared at start either way)"},
      {"parallel", "straggler", &p.straggler,
       "injected slowness: rank=R,slowdown=S, rank=R,delay_ms=D or random=exp|pareto,mean_ms=M "
       "(\"\" = none)"},
      {"parallel", "inject_fault", &p.inject_fault,
       "experiments, fault tests: rank=R,step=S makes rank R fail after global step S, once "
       "(a thread rank throws, an mpirun process kills itself; docs/FAULTS.md); rank=R,every=N "
       "after every N-th step; \"\" = none"},

      {"data_parallel",
       "bucket_bytes",
       &dp.bucket_bytes,
       "gradient bucket size in bytes (tensor fusion); 0 = one allreduce per tensor; auto: 1 MiB "
       "buckets with overlap, one bucket without (docs/PARALLEL.md)",
       0,
       kInf,
       false,
       false,
       {},
       true},
      {"data_parallel",
       "overlap",
       &dp.overlap,
       "start bucket allreduces while backward runs (auto: when every rank's compute threads and "
       "communication thread fit on the CPUs; docs/PARALLEL.md)",
       -kInf,
       kInf,
       false,
       false,
       {"auto", "true", "false"}},
      {"data_parallel",
       "zero_stage",
       &dp.zero_stage,
       "ZeRO stage: 0 replicates the optimizer on every rank (DDP); 1 shards its state and update "
       "over the ranks (reduce-scatter gradients, update 1/P, allgather parameters); auto: 1 with "
       "more than one rank, ring allreduce and an element-wise optimizer (docs/PARALLEL.md)",
       -kInf,
       kInf,
       false,
       false,
       {"auto", "0", "1"}},
      {"data_parallel",
       "sum_in_update",
       &dp.sum_in_update,
       "ZeRO-1 with ranks as threads: sum each shard's gradients over the ranks inside the "
       "optimizer update, reading the other ranks' buffers in place, instead of a reduce-scatter; "
       "auto: where the optimizer is sharded, buckets do not overlap, ranks share memory and the "
       "optimizer is sgd, adam or adamw (docs/PARALLEL.md)",
       -kInf,
       kInf,
       false,
       false,
       {"auto", "true", "false"}},
      {"data_parallel", "sync_batch_norm", &dp.sync_batch_norm,
       "batch-norm statistics over all ranks (default: each rank's own)"},
      {"data_parallel", "compression", &dp.compression,
       "gradient compression of each bucket (docs/COMPRESSION.md): none, fp16, bf16, sign, "
       "qsgd:<bits 2..16>, topk:<ratio or k>, randomk:<ratio or k>, powersgd:<rank>"},
      {"data_parallel",
       "error_feedback",
       &dp.error_feedback,
       "add what compression left out to the next step's gradient (auto: on for topk, randomk, "
       "sign, powersgd; off for fp16, bf16, qsgd)",
       -kInf,
       kInf,
       false,
       false,
       {"auto", "true", "false"}},
      int_at_least("data_parallel", "compression_warmup_steps", &dp.compression_warmup_steps,
                   "steps whose gradients go exact (f32 allreduce) before the codec starts "
                   "(PyTorch PowerSGD's start_powerSGD_iter)",
                   0),
      {"data_parallel", "momentum_correction", &dp.momentum_correction,
       "beta > 0: Deep Gradient Compression's momentum correction and factor masking (each rank's "
       "velocity u = beta u + g goes through the codec, sent elements restart their u; powersgd: "
       "u's part in the subspace sent); optim.momentum must be 0, the codec topk, randomk or "
       "powersgd, error feedback on",
       0, 1, false, true},
      {"data_parallel", "aggregator", &dp.aggregator,
       "Byzantine-robust aggregation of the ranks' gradients (docs/ROBUST.md): mean (the plain "
       "allreduce), median, trimmed:<beta>, krum, multikrum[:<m>], cclip[:<tau>|auto[:<L>]], "
       "bucket:<s>,<aggregator>; other than mean, each bucket is allgathered and aggregated"},
      {"data_parallel", "byzantine", &dp.byzantine,
       "f: the number of Byzantine ranks (the last f ranks), for the attack and for Krum's f", 0,
       kMaxWorkers},
      {"data_parallel", "attack", &dp.attack,
       "what the last data_parallel.byzantine ranks do, for experiments (docs/ROBUST.md): none, "
       "labelflip (label y -> C - 1 - y on their data), signflip[:<c>], scale:<c>, "
       "noise:<sigma>, alie[:<z>], ipm[:<eps>]"},
      {"data_parallel", "worker_momentum", &dp.worker_momentum,
       "robust aggregation: each rank sends its momentum m = beta m + g instead of its gradient "
       "and the aggregator combines momenta (Karimireddy et al. 2021); optim.momentum must be 0",
       0, 0.999},

      {"parameter_server", "servers", &ps.servers,
       "parameter-server ranks (besides parallel.workers workers)", 1, 1024},
      {"parameter_server", "colocate_servers", &ps.colocate_servers,
       "run the servers on a second thread of workers 0 .. servers-1 instead of on ranks of their "
       "own"},
      {"parameter_server",
       "consistency",
       &ps.consistency,
       "bsp (synchronous), async (Downpour), ssp (bounded staleness)",
       -kInf,
       kInf,
       false,
       false,
       {"bsp", "async", "ssp"}},
      int_at_least("parameter_server", "staleness", &ps.staleness,
                   "consistency ssp: steps a worker may run ahead of the slowest", 0),
      int_at_least("parameter_server", "pull_every", &ps.pull_every,
                   "consistency async: pull parameters every this many steps", 1),
      int_at_least("parameter_server", "backup_workers", &ps.backup_workers,
                   "consistency bsp: each step uses the first workers - b gradients (Chen et al.)",
                   0),
      {"parameter_server", "compression", &ps.compression,
       "each worker's push through a codec the servers decode (docs/PS.md, \"Compression\"): "
       "none, fp16, bf16, sign, qsgd:<bits 2..16>, topk:<ratio or k>, randomk:<ratio or k>"},
      {"parameter_server",
       "pull_compression",
       &ps.pull_compression,
       "the parameters of each pull cast by the servers (the f32 master copy stays on them)",
       -kInf,
       kInf,
       false,
       false,
       {"none", "fp16", "bf16"}},
      {"parameter_server",
       "error_feedback",
       &ps.error_feedback,
       "push compression: each worker adds what its codec left out to its next push (auto: on for "
       "topk, randomk, sign; off for fp16, bf16, qsgd)",
       -kInf,
       kInf,
       false,
       false,
       {"auto", "true", "false"}},

      int_at_least("local_sgd", "period", &l.period,
                   "H, the local steps each rank takes between parameter "
                   "averages (1 = synchronous data parallelism; the epoch's last step always "
                   "averages)",
                   1),
      int_at_least("local_sgd", "synchronous_steps", &l.synchronous_steps,
                   "the run's first steps average after every step before "
                   "local steps begin (PyTorch PostLocalSGD's start_localSGD_iter)",
                   0),
      {"local_sgd", "compression", &l.compression,
       "codec for what each rank sends to an average: its model delta since the last average, "
       "error feedback per rank by the codec's default (docs/COMPRESSION.md): none, fp16, bf16, "
       "sign, qsgd:<bits 2..16>, topk:<ratio or k>, randomk:<ratio or k>"},

      {"decentralized", "topology", &dc.topology,
       "the graph each rank averages its parameters over every step (docs/DECENTRALIZED.md; "
       "torus needs P = rows x cols with rows, cols >= 2; full = allreduce average)",
       -kInf, kInf, false, false, topologies},
      int_at_least("decentralized", "global_average_every", &dc.global_average_every,
                   "H: every H-th step averages the replicas over all ranks (allreduce) instead "
                   "of gossiping (0 = never)",
                   0),
      {"decentralized", "overlap", &dc.overlap,
       "gossip the pre-step parameters while forward and backward run (Lian et al.'s D-PSGD: x "
       "<- W x - lr g(x)); false: local step, then gossip (x <- W (x - lr g(x)); with topology "
       "full that is synchronous data parallelism)"},
      {"decentralized", "compression", &dc.compression,
       "codec of CHOCO-SGD's compressed gossip: each rank sends C(x - x_hat) to its neighbours "
       "(docs/DECENTRALIZED.md): none (plain D-PSGD), fp16, bf16, sign, qsgd:<bits 2..16>, "
       "topk:<ratio or k>, randomk:<ratio or k>"},
      {"decentralized", "consensus_step", &dc.consensus_step,
       "CHOCO-SGD's consensus step gamma in (0, 1]: x += gamma sum_j W_rj (x_hat_j - x_hat_r); "
       "0 = by codec (1 for none, fp16, bf16; min(0.4, 10 k / N) for topk, randomk; 0.4 for sign, "
       "qsgd)",
       0, 1},

      int_at_least("pipeline", "micro_batches", &pl.micro_batches,
                   "m: each step's batch is cut into m micro-batches that flow through the "
                   "stages (bubble (p-1)/(m+p-1); the same update as train.accumulate_steps = m)",
                   1),
      {"pipeline",
       "schedule",
       &pl.schedule,
       "gpipe: all forwards, then all backwards (m micro-batches of activations per stage); "
       "1f1b: one forward one backward (PipeDream-flush, at most p in flight); pipedream: "
       "asynchronous 1F1B without flush, an update per micro-batch, weight stashing",
       -kInf,
       kInf,
       false,
       false,
       {"gpipe", "1f1b", "pipedream"}},
      {"pipeline",
       "partition",
       &pl.partition,
       "how the layers are cut into parallel.workers stages: layers (equal counts) or balanced "
       "(equal measured forward + backward time)",
       -kInf,
       kInf,
       false,
       false,
       {"layers", "balanced"}},
      {"pipeline", "deferred_batch_norm", &pl.deferred_batch_norm,
       "batch norm running statistics updated once per step from all m micro-batches' statistics "
       "(torchgpipe's deferred batch norm); false: once per micro-batch, as "
       "train.accumulate_steps = m does"},

      int_at_least("federated", "clients", &fd.clients,
                   "K: simulated clients, each holding its part of the training set "
                   "(federated.partition); at least parallel.workers x processes",
                   1),
      {"federated", "client_fraction", &fd.client_fraction,
       "C: each round max(1, floor(C K)) clients, sampled anew, train and are averaged", 0, 1, true,
       false},
      int_at_least("federated", "local_epochs", &fd.local_epochs,
                   "E: epochs each participant trains on its own data per round, in batches of "
                   "train.batch_size",
                   1),
      int_at_least("federated", "rounds", &fd.rounds,
                   "communication rounds (train.epochs does not apply to federated runs)", 1),
      {"federated", "partition", &fd.partition,
       "how the training set is cut into clients: iid, shards (McMahan's 2 label shards per "
       "client; shards:S for S), dirichlet:A (label skew Dir(A), A > 0; 0.1 strongly non-IID)"},
      {"federated", "fedprox_mu", &fd.fedprox_mu,
       "FedProx: mu/2 ||w - w_global||^2 added to each client's loss (0 = FedAvg)", 0},
      {"federated", "client_failure", &fd.client_failure,
       "injected: the probability that a participant fails after its first local step; it is "
       "dropped from its round and counted",
       0, 1},
      {"federated", "compression", &fd.compression,
       "codec for each client's upload, its model delta from the round's global model, without "
       "error feedback (clients are stateless; docs/FEDERATED.md): none, fp16, bf16, sign, "
       "qsgd:<bits 2..16>, topk:<ratio or k>, randomk:<ratio or k>"},
      {"federated", "compress_download", &fd.compress_download,
       "send the server's broadcast through the same codec too (the global model's delta, with "
       "error feedback kept by the server where the codec's default has it)"},

      {"tensor_parallel",
       "style",
       &tp.style,
       "how the model is split over parallel.workers ranks: megatron (gpt: each block's attention "
       "by heads, its MLP by hidden units; one allreduce per half-block forward and one "
       "backward), allgather (mlp, seed 003: each Linear's outputs split, activations "
       "all-gathered, their gradients all-reduced), auto (the one that fits model.name); a "
       "layer list (layers) takes either for its linears (auto: allgather) and splits its "
       "attention and transformer blocks by heads",
       -kInf,
       kInf,
       false,
       false,
       {"auto", "megatron", "allgather"}},

      int_at_least("hybrid", "dp", &hy.dp,
                   "D: data-parallel replicas of the grid; dp x sp x tp x pp must equal the ranks",
                   1),
      int_at_least("hybrid", "tp", &hy.tp,
                   "T: ranks of each tensor-parallel group ([tensor_parallel] style)", 1),
      int_at_least("hybrid", "pp", &hy.pp,
                   "P: stages of each pipeline ([pipeline] micro_batches, schedule, partition)", 1),
      int_at_least("hybrid", "sp", &hy.sp,
                   "S: ranks of each spatial group, which split every image's rows (spatial "
                   "parallelism, docs/SPATIAL.md); with dp only: tp = pp = 1",
                   1),
      {"hybrid",
       "order",
       &hy.order,
       "which axis varies fastest with the rank: tp-dp-pp (Megatron-LM: tensor groups on "
       "adjacent ranks, then data, pipeline outermost) or tp-pp-dp (data outermost)",
       -kInf,
       kInf,
       false,
       false,
       {"tp-dp-pp", "tp-pp-dp"}},
  };
}

// Shortest text that reads back as the same double, always with a '.' or exponent so that TOML
// reads it as a float.
std::string format_double(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string format_value(const Target& target) {
  struct Visitor {
    std::string operator()(const std::string* v) const { return toml_quote(*v); }
    std::string operator()(const std::int64_t* v) const { return fmt::format("{}", *v); }
    std::string operator()(const double* v) const { return format_double(*v); }
    std::string operator()(const bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(const std::vector<std::int64_t>* v) const {
      return fmt::format("[{}]", fmt::join(*v, ", "));
    }
    std::string operator()(const std::vector<double>* v) const {
      std::vector<std::string> parts;
      for (double x : *v) parts.push_back(format_double(x));
      return fmt::format("[{}]", fmt::join(parts, ", "));
    }
  };
  return std::visit(Visitor{}, target);
}

const char* type_name(const Target& target) {
  switch (target.index()) {
    case 0: return "a string";
    case 1: return "an integer";
    case 2: return "a number";
    case 3: return "true or false";
    case 4: return "a list of integers";
    default: return "a list of numbers";
  }
}

std::string range_text(const Field& field) {
  if (field.auto_or_count) return fmt::format("\"auto\" or an integer >= {}", field.min);
  if (!field.choices.empty()) {
    std::vector<std::string> quoted;
    for (const auto& choice : field.choices) quoted.push_back(toml_quote(choice));
    return fmt::format("one of {}", fmt::join(quoted, ", "));
  }
  const bool has_min = field.min > -kInf;
  const bool has_max = field.max < kInf;
  const bool is_list = field.target.index() >= 4;
  const std::string what = is_list ? "each element" : "value";
  if (has_min && has_max) {
    return fmt::format("{} {} {} {} {}", field.min, field.min_open ? "<" : "<=", what,
                       field.max_open ? "<" : "<=", field.max);
  }
  if (has_min) return fmt::format("{} {} {}", what, field.min_open ? ">" : ">=", field.min);
  if (has_max) return fmt::format("{} {} {}", what, field.max_open ? "<" : "<=", field.max);
  return "any";
}

// "0", "1048576", ...: decimal digits only (no sign, no spaces), an int64 >= min.
bool is_count_at_least(const std::string& text, double min) {
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return static_cast<double>(std::stoll(text)) >= min;
}

// A field's value as TOML: counts of auto_or_count keys unquoted, the rest by format_value.
std::string toml_value(const Field& field) {
  if (const auto* s = std::get_if<std::string*>(&field.target)) {
    if (field.auto_or_count && **s != "auto") return **s;
  }
  return format_value(field.target);
}

// Infinities and NaN are never in range: a number key holds a finite value (TOML's inf and nan
// would otherwise reach the optimizer or the schedule and fail there, under another name).
bool in_range(const Field& field, double value) {
  if (!std::isfinite(value)) return false;
  if (field.min_open ? !(value > field.min) : !(value >= field.min)) return false;
  if (field.max_open ? !(value < field.max) : !(value <= field.max)) return false;
  return true;
}

// `name`: the key as written (an old name where one was used).
[[noreturn]] void throw_type_error(const std::string& name, const Field& field,
                                   const toml::node& node, const std::string& where) {
  throw ConfigError(fmt::format("config key '{}' in {} must be {}, got {} {}", name, where,
                                type_name(field.target), toml_type_name(node),
                                toml_value_text(node)));
}

std::optional<double> as_number(const toml::node& node) {
  if (const auto* i = node.as_integer()) return static_cast<double>(i->get());
  if (const auto* f = node.as_floating_point()) return f->get();
  return std::nullopt;
}

bool accepts_integers(const Field& field) {
  return std::any_of(field.choices.begin(), field.choices.end(), [](const std::string& choice) {
    return !choice.empty() &&
           std::all_of(choice.begin(), choice.end(), [](char c) { return c >= '0' && c <= '9'; });
  });
}

bool accepts_booleans(const Field& field) {
  const auto& c = field.choices;
  return std::find(c.begin(), c.end(), "true") != c.end() &&
         std::find(c.begin(), c.end(), "false") != c.end();
}

// Stores `node` into the field's target, checking only the type (ranges come in validate()).
// `name` is the key as written, for errors.
void assign(const Field& field, const toml::node& node, const std::string& where,
            const std::string& name) {
  struct Visitor {
    const std::string& name;
    const Field& field;
    const toml::node& node;
    const std::string& where;
    void operator()(std::string* v) const {
      // A key whose choices include "true" and "false" (parallel.overlap) also takes a boolean.
      const auto* b = node.as_boolean();
      if (b != nullptr && accepts_booleans(field)) {
        *v = b->get() ? "true" : "false";
        return;
      }
      // A key whose choices include numbers (parallel.zero_stage) also takes integers; validate()
      // then checks them against the choices like any string.
      const auto* i = node.as_integer();
      if (i != nullptr && (accepts_integers(field) || field.auto_or_count)) {
        *v = std::to_string(i->get());
        return;
      }
      const auto* s = node.as_string();
      if (s == nullptr) throw_type_error(name, field, node, where);
      *v = s->get();
    }
    void operator()(std::int64_t* v) const {
      const auto* i = node.as_integer();
      if (i == nullptr) throw_type_error(name, field, node, where);
      *v = i->get();
    }
    void operator()(double* v) const {
      const auto number = as_number(node);
      if (!number) throw_type_error(name, field, node, where);
      *v = *number;
    }
    void operator()(bool* v) const {
      const auto* b = node.as_boolean();
      if (b == nullptr) throw_type_error(name, field, node, where);
      *v = b->get();
    }
    void operator()(std::vector<std::int64_t>* v) const {
      const auto* array = node.as_array();
      if (array == nullptr) throw_type_error(name, field, node, where);
      std::vector<std::int64_t> values;
      for (const auto& element : *array) {
        const auto* i = element.as_integer();
        if (i == nullptr) throw_type_error(name, field, node, where);
        values.push_back(i->get());
      }
      *v = std::move(values);
    }
    void operator()(std::vector<double>* v) const {
      const auto* array = node.as_array();
      if (array == nullptr) throw_type_error(name, field, node, where);
      std::vector<double> values;
      for (const auto& element : *array) {
        const auto number = as_number(element);
        if (!number) throw_type_error(name, field, node, where);
        values.push_back(*number);
      }
      *v = std::move(values);
    }
  };
  std::visit(Visitor{name, field, node, where}, field.target);
}

std::string accepted_keys(const std::vector<Field>& table, std::string_view section) {
  std::vector<std::string> keys;
  for (const auto& field : table) {
    if (field.section == section) keys.emplace_back(field.key);
  }
  return fmt::format("{}", fmt::join(keys, ", "));
}

bool known_section(std::string_view section) {
  for (const char* s : kSections) {
    if (section == s) return true;
  }
  return false;
}

[[noreturn]] void throw_unknown_section(std::string_view section, const std::string& where) {
  throw ConfigError(fmt::format("unknown config section '[{}]' in {}; accepted sections: {}",
                                section, where, fmt::join(kSections, ", ")));
}

const Field& find_field(const std::vector<Field>& table, std::string_view section,
                        std::string_view key, const std::string& where) {
  if (!known_section(section)) throw_unknown_section(section, where);
  for (const auto& field : table) {
    if (field.section == section && field.key == key) return field;
  }
  throw ConfigError(fmt::format("unknown config key '{}.{}' in {}; accepted keys in [{}]: {}",
                                section, key, where, section, accepted_keys(table, section)));
}

// Where each key's current value came from (the file, a --set argument; missing: the built-in
// default), and the name it was written under where that is an old name, for errors.
struct Provenance {
  std::map<std::string, std::string> where;
  std::map<std::string, std::string> written;
};

void add_note(Config& config, std::string note) {
  auto& lines = config.notes.lines;
  if (std::find(lines.begin(), lines.end(), note) == lines.end()) lines.push_back(std::move(note));
}

const RenamedKey* renamed_key(std::string_view name) {
  for (const RenamedKey& renamed : kRenamedKeys) {
    if (name == renamed.old_name) return &renamed;
  }
  return nullptr;
}

// The field that `section.key` (as written at `where`) sets: an old name leads to its new one,
// with a note.
const Field& resolve_field(const std::vector<Field>& table, std::string_view section,
                           std::string_view key, const std::string& where, Config& config,
                           Provenance& provenance) {
  const std::string written = fmt::format("{}.{}", section, key);
  const RenamedKey* renamed = renamed_key(written);
  if (renamed == nullptr) {
    const Field& field = find_field(table, section, key, where);
    provenance.written.erase(field.name());
    return field;
  }
  const std::string_view new_name = renamed->new_name;
  const auto dot = new_name.find('.');
  const Field& field = find_field(table, new_name.substr(0, dot), new_name.substr(dot + 1), where);
  provenance.written[field.name()] = written;
  add_note(config, fmt::format("config key '{}' in {} is the old name of '{}'; it still works, "
                               "but write {} (docs/CONFIG.md)",
                               written, where, new_name, new_name));
  return field;
}

// parallel.strategy's old values become the new ones, with a note.
void rename_value(const Field& field, const std::string& where, Config& config) {
  if (field.name() != "parallel.strategy") return;
  std::string& value = *std::get<std::string*>(field.target);
  for (const RenamedValue& renamed : kRenamedStrategies) {
    if (value != renamed.old_value) continue;
    value = renamed.new_value;
    add_note(config, fmt::format("parallel.strategy = \"{}\" in {} is the old name of \"{}\"; "
                                 "it still works, but write \"{}\"",
                                 renamed.old_value, where, renamed.new_value, renamed.new_value));
  }
}

void apply_table(Config& config, const toml::table& root, const std::string& where,
                 Provenance& provenance) {
  const auto table = fields(config);
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const auto* section_table = section_node.as_table();
    if (section_table == nullptr) {
      throw ConfigError(
          fmt::format("config key '{}' in {} is outside any section; put it under one of [{}]",
                      section, where, fmt::join(kSections, "], [")));
    }
    if (!known_section(section)) throw_unknown_section(section, where);
    for (const auto& [key, node] : *section_table) {
      if (section == "model" && key.str() == "layer") {
        config.model.layers = parse_model_layers(node, where);
        provenance.where["model.layer"] = where;
        continue;
      }
      const Field& field = resolve_field(table, section, key.str(), where, config, provenance);
      assign(field, node, where, fmt::format("{}.{}", section, key.str()));
      rename_value(field, where, config);
      provenance.where[field.name()] = where;
    }
  }
}

void apply_override_impl(Config& config, std::string_view assignment, Provenance& provenance,
                         std::string_view origin = {}) {
  const std::string where =
      origin.empty() ? fmt::format("--set {}", assignment) : std::string(origin);
  const auto equals = assignment.find('=');
  const auto dot = assignment.find('.');
  if (equals == std::string_view::npos || dot == std::string_view::npos || dot > equals) {
    throw ConfigError(
        fmt::format("malformed override '{}'; expected section.key=value, e.g. --set optim.lr=0.05",
                    assignment));
  }
  const std::string_view section = assignment.substr(0, dot);
  const std::string_view key = assignment.substr(dot + 1, equals - dot - 1);
  const std::string_view value = assignment.substr(equals + 1);
  const auto table = fields(config);
  if (section == "model" && key == "layer") {
    throw ConfigError(fmt::format(
        "config key 'model.layer' cannot be set by {}: the layers are [[model.layer]] tables in "
        "the config file (docs/MODELS.md)",
        where));
  }
  const Field& field = resolve_field(table, section, key, where, config, provenance);

  toml::table parsed;
  bool parsed_ok = true;
  try {
    parsed = toml::parse(fmt::format("v = {}", value));
  } catch (const toml::parse_error&) {
    parsed_ok = false;
  }
  const toml::node* node = parsed_ok ? parsed.get("v") : nullptr;
  if (std::holds_alternative<std::string*>(field.target) &&
      (node == nullptr || !node->is_string())) {
    *std::get<std::string*>(field.target) = std::string(value);  // a bare word
  } else if (node == nullptr) {
    throw ConfigError(fmt::format("config key '{}' in {} must be {}, got '{}'",
                                  fmt::format("{}.{}", section, key), where,
                                  type_name(field.target), value));
  } else {
    assign(field, *node, where, fmt::format("{}.{}", section, key));
  }
  rename_value(field, where, config);
  provenance.where[field.name()] = where;
}

// data_parallel.aggregator, byzantine and attack (docs/ROBUST.md). The checks that need the rank
// count P run for data_parallel with P = parallel.workers, when not under mpirun (where P is the
// job's, known once MPI starts: parallel::RobustReducer checks the same there) and P > 1 (one
// rank trains alone: nothing is aggregated, but an attacker is still refused by f < P).
// `where(key)`: where the key was set.
template <typename Where>
void validate_robust(const Config& config, const Where& where) {
  const auto& dp = config.data_parallel;
  std::unique_ptr<aggregate::Aggregator> aggregator;
  try {
    aggregator = aggregate::parse_aggregator(dp.aggregator, static_cast<int>(dp.byzantine));
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("config key 'data_parallel.aggregator' = \"{}\" ({}): {}",
                                  dp.aggregator, where("data_parallel.aggregator"), e.what()));
  }
  std::unique_ptr<aggregate::Attack> attack;
  if (dp.attack != "none" && dp.attack != "labelflip") {
    try {
      attack = aggregate::parse_attack(dp.attack);
    } catch (const ConfigError& e) {
      throw ConfigError(
          fmt::format("config key 'data_parallel.attack' = \"{}\" ({}): {}; or none, labelflip",
                      dp.attack, where("data_parallel.attack"), e.what()));
    }
  }
  if (dp.attack != "none" && dp.byzantine == 0) {
    throw ConfigError(fmt::format(
        "config key 'data_parallel.attack' = \"{}\" ({}) needs data_parallel.byzantine >= 1 "
        "attacking ranks (the last f ranks), got 0; pass --byzantine F",
        dp.attack, where("data_parallel.attack")));
  }
  if (dp.worker_momentum > 0.0 && config.optim.momentum > 0.0) {
    throw ConfigError(fmt::format(
        "config keys 'data_parallel.worker_momentum' = {} ({}) and 'optim.momentum' = {} ({}) "
        "are two momentums: worker momentum replaces the optimizer's (the aggregate of momenta is "
        "the step's direction); set optim.momentum = 0",
        dp.worker_momentum, where("data_parallel.worker_momentum"), config.optim.momentum,
        where("optim.momentum")));
  }
  const std::string& strategy = config.parallel.strategy;
  if ((dp.aggregator != "mean" || dp.attack != "none") && strategy != "data_parallel" &&
      strategy != "parameter_server") {
    throw ConfigError(fmt::format(
        "config keys 'data_parallel.aggregator' = \"{}\" ({}) and 'data_parallel.attack' = "
        "\"{}\" ({}): robust aggregation and attacks apply to parallel.strategy = "
        "\"data_parallel\" and \"parameter_server\", not \"{}\"",
        dp.aggregator, where("data_parallel.aggregator"), dp.attack, where("data_parallel.attack"),
        strategy));
  }
  if (strategy == "parameter_server" && dp.attack == "labelflip") {
    throw ConfigError(fmt::format(
        "config key 'data_parallel.attack' = \"labelflip\" ({}) changes a data-parallel rank's "
        "labels; parameter-server workers take the gradient attacks (alie, signflip, ipm, "
        "noise:S, scale:C)",
        where("data_parallel.attack")));
  }
  if (dp.aggregator == "mean" && (dp.attack == "none" || dp.attack == "labelflip")) {
    if (dp.worker_momentum > 0.0) {
      throw ConfigError(fmt::format(
          "config key 'data_parallel.worker_momentum' = {} ({}) needs robust aggregation (an "
          "aggregator other than mean, or an attack); with the mean it is optim.momentum",
          dp.worker_momentum, where("data_parallel.worker_momentum")));
    }
    return;
  }
  // The allgather path: every rank's whole bucket, f32.
  if (dp.compression != "none") {
    throw ConfigError(fmt::format(
        "config keys 'data_parallel.aggregator' = \"{}\" ({}) and 'data_parallel.compression' = "
        "\"{}\" ({}) do not go together: robust aggregation allgathers uncompressed gradients; "
        "set compression = \"none\"",
        dp.aggregator, where("data_parallel.aggregator"), dp.compression,
        where("data_parallel.compression")));
  }
  if (dp.zero_stage == "1") {
    throw ConfigError(fmt::format(
        "config keys 'data_parallel.aggregator' = \"{}\" ({}) and 'data_parallel.zero_stage' = 1 "
        "({}) do not go together: robust aggregation needs every rank's whole gradient, not a "
        "reduce-scattered shard; set zero_stage = 0 or \"auto\"",
        dp.aggregator, where("data_parallel.aggregator"), where("data_parallel.zero_stage")));
  }
  if (strategy == "parameter_server") {
    if (config.parameter_server.consistency != "bsp") {
      throw ConfigError(fmt::format(
          "config key 'data_parallel.aggregator' = \"{}\" ({}) with attack \"{}\": the "
          "servers combine the gradients of one step, so parameter_server.consistency must be "
          "\"bsp\" (now \"{}\")",
          dp.aggregator, where("data_parallel.aggregator"), dp.attack,
          config.parameter_server.consistency));
    }
  }
  if (strategy == "parameter_server" && !comm::launched_by_mpirun()) {
    // W workers (parallel.workers); a bsp step waits for W - backup_workers of them.
    const auto workers = static_cast<int>(config.parallel.workers);
    const auto f = static_cast<int>(dp.byzantine);
    const auto aggregated = workers - static_cast<int>(config.parameter_server.backup_workers);
    try {
      if (f >= workers) {
        throw ConfigError(
            fmt::format("f = {} attacking workers needs f < W = {} workers", f, workers));
      }
      aggregator->check_inputs(aggregated);
      if (attack && attack->name() == "alie") aggregate::alie_z(workers, f);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format(
          "config keys 'data_parallel.aggregator' = \"{}\" ({}), 'data_parallel.attack' = "
          "\"{}\" and 'data_parallel.byzantine' = {} on W = {} parameter-server workers: {}",
          dp.aggregator, where("data_parallel.aggregator"), dp.attack, f, workers, e.what()));
    }
    return;
  }
  if (strategy != "data_parallel" || comm::launched_by_mpirun()) return;
  const auto ranks = static_cast<int>(config.parallel.workers);
  const auto f = static_cast<int>(dp.byzantine);
  if (f >= ranks) {
    throw ConfigError(
        fmt::format("config key 'data_parallel.byzantine' = {} ({}) needs f < P = {} ranks "
                    "(parallel.workers): at least one rank must be honest",
                    f, where("data_parallel.byzantine"), ranks));
  }
  if (ranks < 2) return;
  try {
    aggregator->check_inputs(ranks);
    if (attack && attack->name() == "alie") aggregate::alie_z(ranks, f);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format(
        "config keys 'data_parallel.aggregator' = \"{}\" ({}), "
        "'data_parallel.attack' = \"{}\" and 'data_parallel.byzantine' = "
        "{} on P = {} ranks: {}",
        dp.aggregator, where("data_parallel.aggregator"), dp.attack, f, ranks, e.what()));
  }
}

// Keys missing from `provenance` are said to come from `unknown_origin`.
void validate_impl(const Config& config, const Provenance& provenance,
                   const char* unknown_origin = "the defaults") {
  Config copy = config;
  const auto table = fields(copy);
  auto where = [&](const std::string& name) {
    const auto it = provenance.where.find(name);
    return it == provenance.where.end() ? std::string(unknown_origin) : it->second;
  };
  // A key as the user wrote it: its old name where that was used.
  auto key = [&](const std::string& name) {
    const auto it = provenance.written.find(name);
    return it == provenance.written.end() ? name : it->second;
  };
  // `number`: the number that failed, for the note that infinities and NaN are never accepted.
  auto out_of_range = [&](const Field& field, const std::string& value, double number = 0.0) {
    throw ConfigError(fmt::format("config key '{}' = {} in {} is out of range; accepted: {}{}",
                                  key(field.name()), value, where(field.name()), range_text(field),
                                  std::isfinite(number) ? "" : " (a finite number)"));
  };
  for (const auto& field : table) {
    const std::string value = format_value(field.target);
    if (const auto* s = std::get_if<std::string*>(&field.target)) {
      if (field.auto_or_count) {
        if (**s != "auto" && !is_count_at_least(**s, field.min)) out_of_range(field, value);
        continue;
      }
      if (field.choices.empty()) continue;
      bool found = false;
      for (const auto& choice : field.choices) found = found || choice == **s;
      if (!found) out_of_range(field, value);
    } else if (const auto* i = std::get_if<std::int64_t*>(&field.target)) {
      if (!in_range(field, static_cast<double>(**i))) out_of_range(field, value);
    } else if (const auto* d = std::get_if<double*>(&field.target)) {
      if (!in_range(field, **d)) out_of_range(field, value, **d);
    } else if (const auto* li = std::get_if<std::vector<std::int64_t>*>(&field.target)) {
      for (auto x : **li) {
        if (!in_range(field, static_cast<double>(x))) out_of_range(field, value);
      }
    } else if (const auto* ld = std::get_if<std::vector<double>*>(&field.target)) {
      for (auto x : **ld) {
        if (!in_range(field, x)) out_of_range(field, value, x);
      }
    }
  }

  // Keys that only make sense together.
  const auto& s = config.schedule;
  if (s.warmup_steps > 0 && s.warmup_epochs > 0) {
    throw ConfigError(fmt::format(
        "config keys 'schedule.warmup_steps' = {} ({}) and 'schedule.warmup_epochs' = {} ({}) "
        "are both set; set only one",
        s.warmup_steps, where("schedule.warmup_steps"), s.warmup_epochs,
        where("schedule.warmup_epochs")));
  }
  if (s.warmup != "none" && s.warmup_steps == 0 && s.warmup_epochs == 0) {
    throw ConfigError(fmt::format(
        "config key 'schedule.warmup' = \"{}\" in {} needs a length; set schedule.warmup_steps "
        "or schedule.warmup_epochs > 0",
        s.warmup, where("schedule.warmup")));
  }
  if (s.decay == "step" && s.step_size == 0) {
    throw ConfigError(fmt::format(
        "config key 'schedule.step_size' = 0 in {} must be > 0 when schedule.decay = \"step\"",
        where("schedule.step_size")));
  }
  // The sparse linear models go with the sparse data sets, only under Hogwild!; Hogwild! also
  // trains the dense models without batch norm on the dense image data sets: the MLP, LeNet-5 and
  // a layer list that does not start with an embedding (one with batch norm is refused when it is
  // built: parallel/hogwild_dense.h).
  const bool hogwild = config.parallel.strategy == "hogwild";
  const bool linear = config.model.name == "logistic" || config.model.name == "svm";
  const bool sparse = data::is_sparse_dataset(config.data.dataset);
  const bool dense_hogwild =
      config.model.name == "mlp" || config.model.name == "lenet5" ||
      (config.model.name == "layers" &&
       (config.model.layers.empty() || config.model.layers[0].kind != "embedding"));
  if (linear != sparse || (linear && !hogwild) || (hogwild && !linear && !dense_hogwild)) {
    throw ConfigError(fmt::format(
        "config keys 'parallel.strategy' = \"{}\" ({}), 'model.name' = \"{}\" ({}) and "
        "'data.dataset' = \"{}\" ({}) do not fit together; models \"logistic\" and \"svm\" "
        "need a sparse data set (\"libsvm\", \"sparse-synthetic\") and strategy \"hogwild\", "
        "and sparse data sets need them; strategy \"hogwild\" also trains \"mlp\", \"lenet5\" "
        "and image layer lists on the dense data sets",
        config.parallel.strategy, where("parallel.strategy"), config.model.name,
        where("model.name"), config.data.dataset, where("data.dataset")));
  }
  // Text windows carry a label per position, which only the transformer predicts.
  const bool text = config.data.dataset == "text";
  // A layer list (model.name = "layers") is a language model when it starts with an embedding.
  const bool layers = config.model.name == "layers";
  if (layers && config.model.layers.empty()) {
    throw ConfigError(fmt::format(
        "config key 'model.name' = \"layers\" ({}) needs the layers: [[model.layer]] tables, each "
        "with a kind and its parameters (docs/MODELS.md; examples/models/ has the shipped models)",
        where("model.name")));
  }
  if (!layers && !config.model.layers.empty()) {
    throw ConfigError(
        fmt::format("[[model.layer]] tables ({}) are read only with model.name = \"layers\", but "
                    "'model.name' = \"{}\" ({}); set model.name = \"layers\" or remove the tables",
                    where("model.layer"), config.model.name, where("model.name")));
  }
  if (layers) nn::check_layer_list(config.model.layers, "model.layer", where("model.layer"));
  const bool language_layers =
      layers && !config.model.layers.empty() && config.model.layers[0].kind == "embedding";
  if (layers && text != language_layers) {
    throw ConfigError(fmt::format(
        "config keys 'model.layer' ({}) and 'data.dataset' = \"{}\" ({}) do not fit together; "
        "a layer list whose first layer is an embedding reads data set \"text\" (a byte per "
        "position), and that data set needs one",
        where("model.layer"), config.data.dataset, where("data.dataset")));
  }
  if (!layers && text != (config.model.name == "gpt")) {
    throw ConfigError(fmt::format(
        "config keys 'model.name' = \"{}\" ({}) and 'data.dataset' = \"{}\" ({}) do not fit "
        "together; model \"gpt\" reads data set \"text\" (a byte per position) and that data set "
        "needs model \"gpt\"",
        config.model.name, where("model.name"), config.data.dataset, where("data.dataset")));
  }
  if (text && config.data.path == DataSection{}.path) {
    throw ConfigError(
        fmt::format("config key 'data.dataset' = \"text\" ({}) reads data.path, which is still the "
                    "Fashion-MNIST folder; set data.path to a text file or folder, e.g. "
                    "/usr/share/games/fortunes (apt-get install fortunes)",
                    where("data.dataset")));
  }
  if (text && config.train.loss != "cross_entropy") {
    throw ConfigError(fmt::format(
        "config key 'train.loss' = \"{}\" ({}) does not apply to text; a language model's loss "
        "is cross_entropy (nats per byte)",
        config.train.loss, where("train.loss")));
  }
  if (text && config.model.gpt_dim % config.model.gpt_heads != 0) {
    throw ConfigError(fmt::format(
        "config key 'model.gpt_heads' = {} ({}) does not divide 'model.gpt_dim' = {} ({}); each "
        "head takes gpt_dim / gpt_heads of the width",
        config.model.gpt_heads, where("model.gpt_heads"), config.model.gpt_dim,
        where("model.gpt_dim")));
  }
  if (config.data.dataset == "mnist" && config.data.path == DataSection{}.path) {
    // MNIST and Fashion-MNIST share their IDX file names: this would train on Fashion-MNIST and
    // report it as MNIST.
    throw ConfigError(fmt::format(
        "config key 'data.dataset' = \"mnist\" ({}) reads data.path = {}, the Fashion-MNIST "
        "files (both use the same IDX file names); set data.path to a folder holding MNIST's "
        "train-images-idx3-ubyte and friends, or use data.dataset = \"fashion-mnist\"",
        where("data.dataset"), config.data.path));
  }
  if (config.data.dataset == "sparse-synthetic" &&
      config.data.sparse_nonzeros > config.data.sparse_features) {
    throw ConfigError(fmt::format(
        "config key 'data.sparse_nonzeros' = {} ({}) is more than 'data.sparse_features' = {} "
        "({}); a sample has at most one value per feature",
        config.data.sparse_nonzeros, where("data.sparse_nonzeros"), config.data.sparse_features,
        where("data.sparse_features")));
  }
  const std::string& strategy = config.parallel.strategy;
  const auto& dp = config.data_parallel;
  const auto& ps = config.parameter_server;
  if (ps.backup_workers > 0 && (strategy != "parameter_server" || ps.consistency != "bsp")) {
    throw ConfigError(fmt::format(
        "config key '{}' = {} ({}) needs parallel.strategy = \"parameter_server\" and "
        "parameter_server.consistency = \"bsp\" (now \"{}\", \"{}\"): an allreduce cannot leave "
        "a late rank out (docs/PS.md, \"Backup workers\"); pass --strategy parameter_server",
        key("parameter_server.backup_workers"), ps.backup_workers,
        where("parameter_server.backup_workers"), strategy, ps.consistency));
  }
  if (ps.pull_every > 1 && ps.consistency != "async") {
    throw ConfigError(fmt::format(
        "config key '{}' = {} ({}) needs parameter_server.consistency = \"async\": bsp and ssp "
        "pull every step (their guarantees are about what a step computes on)",
        key("parameter_server.pull_every"), ps.pull_every, where("parameter_server.pull_every")));
  }
  if ((strategy == "parameter_server" || strategy == "local_sgd" || strategy == "decentralized" ||
       strategy == "pipeline") &&
      dp.sync_batch_norm) {
    throw ConfigError(fmt::format(
        "config key '{}' = true ({}) is for data_parallel training; parallel.strategy = \"{}\" "
        "keeps batch-norm statistics per rank ({})",
        key("data_parallel.sync_batch_norm"), where("data_parallel.sync_batch_norm"), strategy,
        strategy == "parameter_server" ? "parameter servers hold only the trained parameters"
        : strategy == "local_sgd"      ? "local SGD averages them with the parameters"
        : strategy == "pipeline"       ? "a pipeline stage normalizes each micro-batch alone"
                                       : "decentralized SGD mixes them with the parameters"));
  }
  // The partition's text is parsed here, so that "dirichlet:0" fails before any data is loaded.
  try {
    data::parse_partition(config.federated.partition);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("config key 'federated.partition' = \"{}\" ({}): {}",
                                  config.federated.partition, where("federated.partition"),
                                  e.what()));
  }
  if (strategy == "pipeline" || (strategy == "hybrid" && config.hybrid.pp > 1)) {
    const auto& pl = config.pipeline;
    if (config.train.accumulate_steps > 1) {
      throw ConfigError(fmt::format(
          "config key 'train.accumulate_steps' = {} ({}) does not go with parallel.strategy = "
          "\"pipeline\": the pipeline cuts each batch into pipeline.micro_batches = {} itself; "
          "set pipeline.micro_batches instead (the same update)",
          config.train.accumulate_steps, where("train.accumulate_steps"), pl.micro_batches));
    }
    if (pl.schedule == "pipedream" && strategy == "hybrid") {
      throw ConfigError(fmt::format(
          "config key 'pipeline.schedule' = \"pipedream\" ({}) runs under parallel.strategy = "
          "\"pipeline\" only: it updates each stage after every micro-batch, which cannot "
          "average hybrid.dp = {} replicas' gradients and is not built for hybrid.tp = {} "
          "tensor-parallel stages; use pipeline.schedule = \"1f1b\"",
          where("pipeline.schedule"), config.hybrid.dp, config.hybrid.tp));
    }
    if (pl.micro_batches > config.train.batch_size) {
      throw ConfigError(fmt::format(
          "config key 'pipeline.micro_batches' = {} ({}) is more than train.batch_size = {}: "
          "each micro-batch needs at least one sample",
          pl.micro_batches, where("pipeline.micro_batches"), config.train.batch_size));
    }
  }
  if (config.optim.name == "onebit_adam" &&
      (strategy != "data_parallel" || dp.compression != "none" || dp.zero_stage == "1" ||
       dp.aggregator != "mean")) {
    throw ConfigError(fmt::format(
        "config key 'optim.name' = \"onebit_adam\" ({}) exchanges its own 1-bit momentum in "
        "allreduce training: it needs parallel.strategy = \"data_parallel\" (now \"{}\"), "
        "data_parallel.compression = \"none\" (now \"{}\"), zero_stage 0 or auto (now {}) "
        "and the mean aggregator (now {})",
        where("optim.name"), strategy, dp.compression, dp.zero_stage, dp.aggregator));
  }
  if (strategy == "parameter_server" && config.optim.name == "lars") {
    throw ConfigError(fmt::format(
        "config key 'optim.name' = \"lars\" ({}) needs whole-tensor norms, which a parameter "
        "server's key range does not hold; use sgd, adam or adamw with parallel.strategy = "
        "\"parameter_server\"",
        where("optim.name")));
  }
  // hybrid: ZeRO-1 on the grid's data axis (strategies/hybrid/data_axis.h).
  if (dp.zero_stage == "1" && strategy != "data_parallel" && strategy != "hybrid") {
    throw ConfigError(fmt::format(
        "config key '{}' = {} ({}) shards the optimizer of allreduce training (strategy "
        "data_parallel); parallel.strategy = \"{}\" keeps its own state (set zero_stage = 0 or "
        "\"auto\")",
        key("data_parallel.zero_stage"), dp.zero_stage, where("data_parallel.zero_stage"),
        strategy));
  }
  if (dp.sum_in_update == "true" && strategy != "data_parallel") {
    throw ConfigError(fmt::format(
        "config key '{}' = true ({}) sums ZeRO-1 shards of allreduce training (strategy "
        "data_parallel); "
        "parallel.strategy = \"{}\" has none (set it to false or \"auto\")",
        key("data_parallel.sum_in_update"), where("data_parallel.sum_in_update"), strategy));
  }
  try {
    compress::parse_codec(dp.compression);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("config key '{}' = \"{}\" ({}): {}",
                                  key("data_parallel.compression"), dp.compression,
                                  where("data_parallel.compression"), e.what()));
  }
  // Each strategy that compresses reads its own key; a codec named where the strategy does not
  // read it is an error, never silently ignored (the --compression flag sets
  // data_parallel.compression for the strategies without a key of their own).
  const std::string* const compression_values[] = {
      &dp.compression, &ps.compression, &config.local_sgd.compression,
      &config.decentralized.compression, &config.federated.compression};
  static_assert(std::size(compression_values) == std::size(kCompressingStrategies));
  for (std::size_t i = 0; i < std::size(kCompressingStrategies); ++i) {
    const std::string_view owner = kCompressingStrategies[i];
    const std::string* const value = compression_values[i];
    const std::string name = std::string(owner) + ".compression";
    if (*value != "none" && strategy != owner) {
      throw ConfigError(fmt::format(
          "config key '{}' = \"{}\" ({}): parallel.strategy = \"{}\" does not compress; "
          "--compression is taken by data_parallel, parameter_server, local_sgd, decentralized "
          "and federated (each its own key, docs/COMPRESSION.md)",
          key(name), *value, where(name), strategy));
    }
    if (strategy != owner || owner == "data_parallel" || owner == "parameter_server") {
      continue;
    }
    try {
      if (compress::parse_codec(*value).kind == compress::CodecKind::kPowerSgd) {
        throw ConfigError(
            "PowerSGD factors each gradient tensor as a matrix with state shared by all ranks of "
            "a synchronous allreduce, which a model delta sent to an average, a neighbour or a "
            "server does not have; accepted here: none, fp16, bf16, sign, qsgd:<bits>, "
            "topk:<ratio or k>, randomk:<ratio or k>");
      }
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("config key '{}' = \"{}\" ({}): {}", key(name), *value,
                                    where(name), e.what()));
    }
  }
  if (config.federated.compress_download && config.federated.compression == "none") {
    throw ConfigError(fmt::format(
        "config key '{}' = true ({}) casts the server's broadcast with the uploads' codec, but "
        "'federated.compression' = \"none\"; name a codec (--compression fp16) or set "
        "compress_download = false",
        key("federated.compress_download"), where("federated.compress_download")));
  }
  const DecentralizedSection& dc = config.decentralized;
  if (strategy == "decentralized" && (dc.compression != "none" || dc.consensus_step > 0.0) &&
      (dc.topology == "one-peer-exponential" || dc.overlap)) {
    const std::string name =
        dc.compression != "none" ? "decentralized.compression" : "decentralized.consensus_step";
    throw ConfigError(fmt::format(
        "config key '{}' ({}) runs CHOCO-SGD's compressed gossip, which needs a static topology "
        "(ring, torus, exponential, full; now \"{}\") and the local step before the gossip "
        "(decentralized.overlap = false; now {}): each rank mixes its neighbours' public copies, "
        "rebuilt from what they sent (docs/DECENTRALIZED.md)",
        key(name), where(name), dc.topology, dc.overlap));
  }
  if (strategy == "parameter_server") {
    try {
      if (compress::parse_codec(ps.compression).kind == compress::CodecKind::kPowerSgd) {
        throw ConfigError(
            "PowerSGD's factors are sums over the workers between two rounds, which one worker's "
            "push to a server cannot form; accepted with parameter servers: none, fp16, bf16, "
            "sign, qsgd:<bits>, topk:<ratio or k>, randomk:<ratio or k>");
      }
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("config key '{}' = \"{}\" ({}): {}",
                                    key("parameter_server.compression"), ps.compression,
                                    where("parameter_server.compression"), e.what()));
    }
  }
  if (dp.momentum_correction > 0.0) {
    // Factor masking restarts the velocity of what was sent: only a sparsifier (or PowerSGD,
    // whose masked part is a rank-r subspace) leaves the rest to accumulate (a cast or sign sends
    // every element, and the momentum would vanish), and it is plain SGD's momentum moved into the
    // codec's input (Adam keeps its own moments).
    const compress::CodecKind kind = compress::parse_codec(dp.compression).kind;
    const bool sparsifier = kind == compress::CodecKind::kTopk ||
                            kind == compress::CodecKind::kRandomk ||
                            kind == compress::CodecKind::kPowerSgd;
    if (!sparsifier || dp.error_feedback == "false" || config.optim.momentum != 0.0 ||
        config.optim.name != "sgd") {
      throw ConfigError(fmt::format(
          "config key '{}' = {} ({}) moves SGD's momentum into a sparsifier's input (Deep "
          "Gradient Compression): it needs data_parallel.compression = topk:R, randomk:R or "
          "powersgd:R (now "
          "\"{}\"), error feedback on or auto (now {}), optim.name = \"sgd\" (now \"{}\") and "
          "optim.momentum = 0 (now {}; set the same beta here instead)",
          key("data_parallel.momentum_correction"), dp.momentum_correction,
          where("data_parallel.momentum_correction"), dp.compression, dp.error_feedback,
          config.optim.name, config.optim.momentum));
    }
  }
  if (dp.compression != "none" && dp.zero_stage == "1") {
    throw ConfigError(fmt::format(
        "config keys '{}' = 1 ({}) and 'data_parallel.compression' = \"{}\" ({}) do not go "
        "together: a compressed bucket is exchanged whole, not reduce-scattered; set zero_stage "
        "= 0 or \"auto\"",
        key("data_parallel.zero_stage"), where("data_parallel.zero_stage"), dp.compression,
        where("data_parallel.compression")));
  }
  if (dp.zero_stage == "1" && config.optim.name == "lars") {
    throw ConfigError(fmt::format(
        "config key 'optim.name' = \"lars\" ({}) needs whole-tensor norms, which a ZeRO shard "
        "does not hold (it may cut a tensor); use sgd, adam or adamw with {} = {}, or "
        "zero_stage = 0",
        where("optim.name"), key("data_parallel.zero_stage"), dp.zero_stage));
  }
  validate_robust(config, where);
  try {
    parse_fault(config.parallel.inject_fault);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("config key 'parallel.inject_fault' in {}: {}",
                                  where("parallel.inject_fault"), e.what()));
  }
  try {
    parse_straggler(config.parallel.straggler);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("config key 'parallel.straggler' in {}: {}",
                                  where("parallel.straggler"), e.what()));
  }
  const auto& shape = config.data.synthetic_shape;
  std::int64_t numel = 1;
  for (auto dim : shape) numel *= dim;
  if (shape.size() != 3 || numel > 65536) {
    throw ConfigError(fmt::format(
        "config key 'data.synthetic_shape' = [{}] in {} must be 3 sizes (C, H, W) of at most "
        "65536 values in all",
        fmt::join(shape, ", "), where("data.synthetic_shape")));
  }
}

Config parse_config_impl(std::string_view toml_text, const std::string& source,
                         const std::vector<std::string>& overrides, bool validated) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("cannot parse config {} at line {}, column {}: {}", source,
                                  e.source().begin.line, e.source().begin.column, e.description()));
  }
  Config config;
  Provenance provenance;
  apply_table(config, root, source, provenance);
  for (const auto& assignment : overrides) apply_override_impl(config, assignment, provenance);
  if (validated) validate_impl(config, provenance);
  return config;
}

std::string read_config_text(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    // An ifstream opens a directory and reads nothing, which would train on the defaults.
    throw ConfigError(fmt::format(
        "config file {} is a directory; give --config a TOML file (examples/*.toml, or a run "
        "folder's resolved.toml)",
        path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(
        fmt::format("cannot open config file {}; check the path given to --config", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw ConfigError(
        fmt::format("cannot read config file {}; check the path given to --config", path));
  }
  return text.str();
}

}  // namespace

Config parse_config(std::string_view toml_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  return parse_config_impl(toml_text, source, overrides, /*validated=*/true);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config_impl(read_config_text(path), path, overrides, /*validated=*/true);
}

Config load_config_unvalidated(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config_impl(read_config_text(path), path, overrides, /*validated=*/false);
}

void apply_override(Config& config, std::string_view assignment, std::string_view origin) {
  Provenance provenance;
  apply_override_impl(config, assignment, provenance, origin);
}

// Where the keys came from is not known here (a sweep point, a config built in code).
std::string compression_key_for(std::string_view strategy) {
  if (strategy == "ps") strategy = "parameter_server";
  for (const std::string_view owner : kCompressingStrategies) {
    if (strategy == owner) return std::string(owner) + ".compression";
  }
  return "data_parallel.compression";
}

void validate(const Config& config) { validate_impl(config, Provenance{}, "the configuration"); }

std::vector<std::string> ignored_settings(const Config& config) {
  const std::string& strategy = config.parallel.strategy;
  std::vector<std::string> ignored = config.notes.lines;
  // A section read by one strategy, set away from its defaults under another.
  const auto section_note = [&](const char* section, bool is_default) {
    if (strategy == section || is_default) return;
    // The grid runs the pipeline and the tensor split with their own sections (each only when
    // its axis is split), and reads data_parallel.zero_stage alone for its data axis.
    if (strategy == "hybrid") {
      const std::string_view name(section);
      if ((name == "pipeline" && config.hybrid.pp > 1) ||
          (name == "tensor_parallel" && config.hybrid.tp > 1)) {
        return;
      }
      if (name == "data_parallel") {
        DataParallelSection others = config.data_parallel;
        others.zero_stage = DataParallelSection{}.zero_stage;
        if (others == DataParallelSection{}) return;
        ignored.push_back(
            "[data_parallel] keys other than zero_stage are ignored: under parallel.strategy = "
            "\"hybrid\" the grid's data axis is a plain ring allreduce (or ZeRO-1)");
        return;
      }
    }
    ignored.push_back(
        fmt::format("[{}] keys are ignored: they apply to parallel.strategy = \"{}\", not \"{}\"",
                    section, section, strategy));
  };
  section_note("parameter_server", config.parameter_server == ParameterServerSection{});
  // local_sgd reads the allreduce settings of its parameter averages but not these.
  section_note("data_parallel", config.data_parallel == DataParallelSection{});
  section_note("local_sgd", config.local_sgd == LocalSgdSection{});
  section_note("decentralized", config.decentralized == DecentralizedSection{});
  section_note("pipeline", config.pipeline == PipelineSection{});
  section_note("federated", config.federated == FederatedSection{});
  section_note("tensor_parallel", config.tensor_parallel == TensorParallelSection{});
  section_note("hybrid", config.hybrid == HybridSection{});
  // The pipeline's stages never sleep as a straggler; a tensor group's ranks all compute as
  // rank 0 of their data replica (their samples are the same).
  if (!config.parallel.straggler.empty() &&
      (strategy == "pipeline" || strategy == "tensor_parallel")) {
    ignored.push_back(fmt::format(
        "parallel.straggler = \"{}\" (--straggler) is ignored by parallel.strategy = \"{}\"{}; "
        "data_parallel and parameter_server, whose ranks each compute samples of their own, "
        "inject it",
        config.parallel.straggler, strategy,
        strategy == "pipeline" ? ""
                               : " (its ranks share every sample and draw it as one rank: "
                                 "rank=0 or a random delay slows all of them alike, another "
                                 "rank none)"));
  }
  if (config.optim.name != "onebit_adam" &&
      config.optim.freeze_step != OptimSection{}.freeze_step) {
    ignored.push_back(fmt::format(
        "optim.freeze_step = {} is ignored: it is 1-bit Adam's (optim.name = \"onebit_adam\"), "
        "not {}'s",
        config.optim.freeze_step, config.optim.name));
  }
  const ScheduleSection& s = config.schedule;
  if (s.warmup == "gradual" && (s.scaling == "none" || config.train.batch_size == s.base_batch)) {
    ignored.push_back(fmt::format(
        "schedule.warmup = \"gradual\" does nothing here: it ramps from optim.lr to the "
        "batch-scaled peak (Goyal et al.), and with schedule.scaling = \"{}\" and train.batch_size "
        "= {} (schedule.base_batch = {}) the two are equal; for a ramp from a fraction of the rate "
        "use warmup = \"constant\" with warmup_factor, or a scaling rule",
        s.scaling, config.train.batch_size, s.base_batch));
  }
  return ignored;
}

std::string to_toml(const Config& config) {
  Config copy = config;
  const auto table = fields(copy);
  std::string out =
      "# dtrain configuration. Every key is listed with its meaning and accepted values;\n"
      "# `dtrain train --config FILE` reads it, `--set section.key=value` overrides a key.\n";
  for (const char* section : kSections) {
    out += fmt::format("\n[{}]\n", section);
    if (const StrategyInfo* owner = find_strategy_or_null(section)) {
      out +=
          fmt::format("# read by parallel.strategy = \"{}\" only ({})\n", owner->name, owner->docs);
    }
    for (const auto& field : table) {
      if (field.section != std::string_view(section)) continue;
      out += fmt::format("# {} ({})\n{} = {}\n", field.help, range_text(field), field.key,
                         toml_value(field));
    }
    if (std::string_view(section) == "model") {
      out +=
          "# layers: the model as [[model.layer]] tables after these keys, each a kind and its "
          "parameters (docs/MODELS.md, examples/models/)\n";
      out += model_layers_toml(config.model.layers);
    }
  }
  return out;
}

std::string canonical_key(std::string_view name) {
  const RenamedKey* renamed = renamed_key(name);
  return renamed == nullptr ? std::string(name) : std::string(renamed->new_name);
}

std::vector<std::string> config_keys() {
  Config config;
  std::vector<std::string> keys;
  for (const auto& field : fields(config)) keys.push_back(field.name());
  return keys;
}

}  // namespace dtrain::train
