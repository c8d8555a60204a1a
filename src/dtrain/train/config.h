// train::Config: everything a training run depends on, read from a TOML file with a default for
// every key, then `--set section.key=value` overrides, then validated.
//
// The key table in config.cc is the single source of truth: parsing, overrides, validation, the
// resolved.toml written into each run folder and `dtrain config` all walk it, so a key added there
// is accepted, checked and written everywhere. Unknown sections or keys are errors (a typo must not
// silently train with a default), and every error names the key, the value, the file (or the
// --set argument) and what is accepted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/nn/layer_list.h"

namespace dtrain::train {

// The most ranks (threads) parallel.workers may start in one process.
inline constexpr int kMaxWorkers = 1024;

// [model]: what nn::build_model builds (see nn/model_zoo.h for the meaning of each key).
struct ModelSection {
  // mlp | lenet5 | resnet | gpt | layers | logistic | svm (the last two: hogwild)
  std::string name = "mlp";
  std::vector<std::int64_t> hidden{256, 256};  // mlp hidden widths
  std::string activation = "relu";
  double activation_alpha = 0.01;
  double dropout = 0.0;
  std::string init = "he";  // he | xavier | normal
  double init_sigma = 0.01;
  std::int64_t resnet_width = 16;
  std::int64_t resnet_blocks = 1;
  // gpt (docs/TRANSFORMER.md): blocks, attention heads and model width; the context length is the
  // data's window (data.block).
  std::int64_t gpt_layers = 4;
  std::int64_t gpt_heads = 4;
  std::int64_t gpt_dim = 128;
  // layers: the [[model.layer]] tables (nn/layer_list.h, docs/MODELS.md), outside the key table:
  // read and written by model_layers_config.h.
  nn::LayerList layers;
  bool operator==(const ModelSection&) const = default;
};

// [data]: the data set and how much of it to use.
struct DataSection {
  // fashion-mnist | mnist | cifar10 | synthetic | text | libsvm | sparse-synthetic (the last two:
  // hogwild)
  std::string dataset = "fashion-mnist";
  std::string path = "/usr/share/datasets/fashion-mnist";  // libsvm: the training file
  std::string test_path;  // libsvm: the test file ("" = no test set)
  // sparse-synthetic (data::make_sparse_synthetic): synthetic_samples + synthetic_test_samples
  // samples of synthetic_seed, labels sign(w* . x) flipped with probability sparse_label_noise.
  std::int64_t sparse_features = 100000;
  std::int64_t sparse_nonzeros = 20;
  double sparse_label_noise = 0.0;
  // synthetic only: Gaussian class clusters (data::make_synthetic); one draw of
  // synthetic_samples + synthetic_test_samples is split into train and test, so both come from the
  // same class means.
  std::int64_t synthetic_samples = 2048;
  std::int64_t synthetic_test_samples = 512;
  std::int64_t synthetic_classes = 10;
  std::vector<std::int64_t> synthetic_shape{1, 8, 8};  // (C, H, W)
  double synthetic_noise = 0.5;
  std::int64_t synthetic_seed = 1;
  // text (data/text_corpus.h): windows of `block` bytes (+ 1 for the last label) drawn at seeded
  // offsets (synthetic_seed) from the first 1 - text_holdout of the bytes (text_windows of them;
  // 0 = bytes / block) and from the rest (text_test_windows).
  std::int64_t block = 128;
  std::int64_t text_windows = 0;
  std::int64_t text_test_windows = 256;
  double text_holdout = 0.1;
  // Use only the first N samples (0 = all): for quick runs.
  std::int64_t limit_train = 0;
  std::int64_t limit_test = 0;
  bool operator==(const DataSection&) const = default;
};

// [train]: the loop.
struct TrainSection {
  std::int64_t epochs = 5;
  std::int64_t batch_size = 128;
  std::int64_t seed = 0;  // model init, shuffling and dropout streams
  std::int64_t threads = 1;
  std::string loss = "cross_entropy";  // cross_entropy | mse (on one-hot targets)
  std::int64_t log_every = 100;        // steps between metrics.jsonl step records
  std::int64_t eval_every_steps = 0;   // 0 = evaluate at epoch ends only
  std::vector<double> accuracy_targets{0.85, 0.88};
  std::int64_t checkpoint_every = 1;  // epochs; 0 = only at the end
  std::int64_t keep_checkpoints = 2;  // newest N kept; 0 = keep all
  // Checkpoints inside an epoch as well (docs/FAULTS.md): every N steps and/or every T seconds
  // of the run (0 = off); mtbf_hours > 0 with checkpoint_every_seconds = 0 chooses T by the
  // Young/Daly rule, sqrt(2 x checkpoint cost x MTBF), from the measured cost.
  std::int64_t checkpoint_every_steps = 0;
  double checkpoint_every_seconds = 0.0;
  double mtbf_hours = 0.0;
  // Tier 1 of two (docs/FAULTS.md): a checkpoint in shared memory every N steps (0 = off), in a
  // file under memory_checkpoint_folder that outlives the process but not the machine; a restart
  // resumes from it when it is newer than checkpoints/.
  std::int64_t memory_checkpoint_every_steps = 0;
  std::string memory_checkpoint_folder = "/dev/shm";
  // Rank threads that fail (a rank's error, a deadline) restart inside the process from the newest
  // checkpoint, up to N times, before the process exits 4 (docs/FAULTS.md); not under mpirun.
  std::int64_t in_process_restarts = 0;
  // Micro-batches per optimizer step: each rank's share of a batch is split into this many
  // forward/backward passes whose gradients add up (less memory, the same trajectory).
  std::int64_t accumulate_steps = 1;
  bool operator==(const TrainSection&) const = default;
};

// [optim]: optim::OptimizerConfig; lr is the schedule's base learning rate.
struct OptimSection {
  std::string name = "sgd";  // sgd | adam | adamw | lars | onebit_adam
  double lr = 0.1;
  double momentum = 0.0;  // sgd, lars only (adam and adamw reject a non-zero value)
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double trust_coefficient = 0.001;
  std::int64_t freeze_step = 100;  // onebit_adam: exact Adam steps before the 1-bit phase
  bool operator==(const OptimSection&) const = default;
};

// [schedule]: optim::ScheduleConfig. warmup_epochs is converted to steps by the trainer.
struct ScheduleSection {
  std::string decay = "constant";  // constant | step | cosine
  std::int64_t step_size = 0;
  double gamma = 0.1;
  double min_lr = 0.0;
  std::string scaling = "none";  // none | linear | sqrt
  std::int64_t base_batch = 128;
  std::string warmup = "none";  // none | constant | gradual
  std::int64_t warmup_steps = 0;
  std::int64_t warmup_epochs = 0;
  double warmup_factor = 0.1;
  bool operator==(const ScheduleSection&) const = default;
};

// [parallel]: what every strategy shares: which strategy, how many ranks, the collective algorithm,
// deadlines and the trace. train.batch_size is the global batch: each step's batch is split over
// all ranks (threads x processes).
struct ParallelSection {
  // A name of strategy_registry.h: data_parallel | parameter_server | hogwild | local_sgd (the
  // old names "allreduce" and "ps" are read as warning aliases).
  std::string strategy = "data_parallel";
  // Ranks started as threads of each process (x processes under mpirun). Under parameter_server
  // these are the workers; the servers come on top (parameter_server.servers).
  std::int64_t workers = 1;
  std::string allreduce = "ring";       // a comm allreduce algorithm
  double stall_warning_seconds = 10.0;  // warn when a bucket waits this long
  double comm_timeout_seconds = 0.0;    // deadline of every wait; 0 = DTRAIN_COMM_TIMEOUT_MS or 60
  std::int64_t trace_steps = 50;        // steps recorded in trace.json; 0 = no trace
  std::string straggler;                // injected slowness (train/straggler.h); "" = none
  std::string inject_fault;             // an injected failure (train/fault_injection.h); "" = none
  bool check_headers = true;            // per-bucket argument check across ranks
  bool operator==(const ParallelSection&) const = default;
};

// [data_parallel]: parallel.strategy = "data_parallel" (strategies/data_parallel/,
// docs/PARALLEL.md).
struct DataParallelSection {
  std::string bucket_bytes = "auto";  // gradient bucket bytes, 0 = one per tensor (fusion_policy.h)
  std::string overlap = "auto";       // allreduce buckets while backward runs: auto|true|false
  std::string zero_stage = "auto";    // ZeRO-1 (shard the optimizer): auto|0|1 (zero_policy.h)
  std::string sum_in_update = "auto";  // ZeRO-1: sum the shards inside the update: auto|true|false
                                       // (fused_update_policy.h)
  bool sync_batch_norm = false;        // batch-norm statistics over all ranks
  // A codec of compress/ applied to each gradient bucket (docs/COMPRESSION.md): none | fp16 |
  // bf16 | sign | qsgd:B | topk:R | randomk:R | powersgd:R.
  std::string compression = "none";
  std::string error_feedback = "auto";        // auto (the codec's default) | true | false
  std::int64_t compression_warmup_steps = 0;  // steps exchanged exactly before the codec starts
  // DGC's momentum correction (Lin et al. 2018): each rank's velocity u = beta u + g goes through
  // the codec instead of g, and what is sent restarts its u; optim.momentum must then be 0.
  double momentum_correction = 0.0;
  // Byzantine-robust aggregation (docs/ROBUST.md, parallel/reducers/robust_reducer.h): an
  // aggregate/ spec other than "mean" allgathers each bucket and aggregates the P gradients;
  // "mean" without attack is the plain allreduce.
  std::string aggregator = "mean";
  std::int64_t byzantine = 0;   // f: the last f ranks attack; also Krum's f
  std::string attack = "none";  // none | labelflip | an aggregate/attack.h spec (alie, signflip..)
  // Robust runs: each rank sends its momentum m = beta m + g instead of its gradient, and the
  // aggregator combines momenta (Karimireddy et al. 2021); optim.momentum is then 0.
  double worker_momentum = 0.0;
  bool operator==(const DataParallelSection&) const = default;
};

// [parameter_server]: parallel.strategy = "parameter_server" (strategies/parameter_server/,
// docs/PS.md).
struct ParameterServerSection {
  std::int64_t servers = 1;         // server ranks, besides the workers
  bool colocate_servers = false;    // servers on a second thread of workers 0 .. servers-1
  std::string consistency = "bsp";  // bsp | async | ssp
  std::int64_t staleness = 3;       // ssp: how many steps a worker may run ahead
  std::int64_t pull_every = 1;      // async: pull parameters every this many steps
  std::int64_t backup_workers = 0;  // bsp: a step uses the first workers - b gradients
  // Pushes through a codec of compress/ (ps/compression.h, docs/PS.md "Compression"): none |
  // fp16 | bf16 | sign | qsgd:B | topk:R | randomk:R; pulls: none | fp16 | bf16.
  std::string compression = "none";
  std::string pull_compression = "none";
  std::string error_feedback = "auto";  // auto (the codec's default) | true | false
  bool operator==(const ParameterServerSection&) const = default;
};

// [local_sgd]: parallel.strategy = "local_sgd" (strategies/local_sgd/local_sgd.h): each rank
// takes `period` steps on its own replica, then the replicas average their parameters.
struct LocalSgdSection {
  std::int64_t period = 4;             // H: local steps between averages (1 = synchronous SGD)
  std::int64_t synchronous_steps = 0;  // steps averaged every step first (PostLocalSGD's warm-up)
  // A compress/codec_spec.h codec for each average's model delta (docs/COMPRESSION.md).
  std::string compression = "none";
  bool operator==(const LocalSgdSection&) const = default;
};

// [decentralized]: parallel.strategy = "decentralized" (strategies/decentralized/
// decentralized_sgd.h, docs/DECENTRALIZED.md): each rank keeps its own replica, takes a local step
// and averages its parameters with its neighbours in `topology` every step (D-PSGD).
struct DecentralizedSection {
  std::string topology = "one-peer-exponential";  // a comm::parse_topology name
  std::int64_t global_average_every = 0;          // H: a global average every H steps; 0 = never
  bool overlap = false;  // gossip the pre-step parameters during forward/backward (Lian et al.)
  // CHOCO-SGD's compressed gossip (docs/DECENTRALIZED.md): a codec, and the consensus step gamma.
  std::string compression = "none";
  double consensus_step = 0.0;  // 0 = by codec (docs/DECENTRALIZED.md)
  bool operator==(const DecentralizedSection&) const = default;
};

// [pipeline], read by parallel.strategy = "pipeline" (strategies/pipeline/pipeline_strategy.h,
// docs/PIPELINE.md): parallel.workers stages, each step's batch cut into micro_batches.
struct PipelineSection {
  std::int64_t micro_batches = 4;    // m: micro-batches per step (bubble (p-1)/(m+p-1))
  std::string schedule = "1f1b";     // gpipe | 1f1b | pipedream (async, weight stashing)
  std::string partition = "layers";  // layers (equal counts) | balanced (measured layer times)
  bool deferred_batch_norm = false;  // running statistics once per step from all micro-batches
  bool operator==(const PipelineSection&) const = default;
};

// [federated], read by parallel.strategy = "federated" (strategies/federated/, docs/FEDERATED.md):
// FedAvg over `clients` simulated clients spread over the ranks; each round a fraction of them runs
// local_epochs epochs from the global model, which then becomes their sample-weighted average.
struct FederatedSection {
  std::int64_t clients = 100;        // K
  double client_fraction = 0.1;      // C in (0, 1]: max(1, floor(C K)) clients per round
  std::int64_t local_epochs = 1;     // E
  std::int64_t rounds = 100;         // communication rounds (train.epochs does not apply)
  std::string partition = "iid";     // iid | shards[:S] | dirichlet:A (data/client_partition.h)
  double fedprox_mu = 0.0;           // FedProx's mu; 0 = FedAvg
  double client_failure = 0.0;       // injected: probability a participant fails mid-round
  std::string compression = "none";  // a codec for each client's upload (its model delta)
  bool compress_download = false;    // the same codec for the server's broadcast (its delta)
  bool operator==(const FederatedSection&) const = default;
};

// [tensor_parallel], read by parallel.strategy = "tensor_parallel" (strategies/tensor_parallel/
// tensor_parallel_strategy.h, docs/TENSOR_PARALLEL.md): parallel.workers ranks, one group.
struct TensorParallelSection {
  // auto (by model.name) | megatron (gpt: column/row-parallel pairs) | allgather (mlp: seed 003)
  std::string style = "auto";
  bool operator==(const TensorParallelSection&) const = default;
};

// [hybrid], read by parallel.strategy = "hybrid" (strategies/hybrid/, docs/HYBRID.md): a process
// grid of dp x sp x tp x pp ranks (parallel/process_grid.h); the pipeline reads [pipeline], the
// tensor split [tensor_parallel]; the spatial split has no section.
struct HybridSection {
  std::int64_t dp = 1;             // data-parallel replicas
  std::int64_t tp = 1;             // ranks of each tensor-parallel group
  std::int64_t pp = 1;             // stages of each pipeline
  std::int64_t sp = 1;             // ranks of each spatial group (image rows split; tp = pp = 1)
  std::string order = "tp-dp-pp";  // axes from the fastest-varying rank index: tp-dp-pp | tp-pp-dp
  bool operator==(const HybridSection&) const = default;
};

struct Config {
  ModelSection model;
  DataSection data;
  TrainSection train;
  OptimSection optim;
  ScheduleSection schedule;
  ParallelSection parallel;
  DataParallelSection data_parallel;
  ParameterServerSection parameter_server;
  LocalSgdSection local_sgd;
  DecentralizedSection decentralized;
  PipelineSection pipeline;
  TensorParallelSection tensor_parallel;
  FederatedSection federated;
  HybridSection hybrid;
  // Sentences about how the text was written rather than what the run does (an old key name that
  // still works): printed with ignored_settings(). Two configs that train the same compare equal
  // whatever their notes.
  struct Notes {
    std::vector<std::string> lines;
    bool operator==(const Notes&) const { return true; }
  } notes;
  bool operator==(const Config&) const = default;
};

// Reads `path` (TOML), applies `overrides` ("section.key=value", in order) and validates. Throws
// ConfigError for a missing or unparsable file, an unknown section or key, a value of the wrong
// type, or a value out of range.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// As load_config without the range and cross-key checks (types and key names are checked): for
// `dtrain sweep`, whose axes can make a file valid that is not valid alone (byzantine = 2 needs the
// --workers 8 of its axis); the sweep validates every point before running any.
Config load_config_unvalidated(const std::string& path,
                               const std::vector<std::string>& overrides = {});

// The same from TOML text; `source` names it in error messages (a file name).
Config parse_config(std::string_view toml_text, const std::string& source,
                    const std::vector<std::string>& overrides = {});

// Applies one "section.key=value" to `config` without validating ranges (types are checked). The
// value is read as TOML for the key's type: 3, 0.1, 1e-3, true, [256, 256], "text"; a string key
// also takes a bare word (model.name=resnet). `origin` names where the assignment came from in
// errors ("the sweep axis --workers"); empty means "--set <assignment>".
void apply_override(Config& config, std::string_view assignment, std::string_view origin = {});

// Range and cross-key checks; ConfigError naming the key, the value and the accepted range.
void validate(const Config& config);

// The strategies that compress, each reading its own "<strategy>.compression" key
// (docs/COMPRESSION.md).
inline constexpr std::string_view kCompressingStrategies[] = {
    "data_parallel", "parameter_server", "local_sgd", "decentralized", "federated"};
// The key --compression sets for `strategy`: its own where it compresses ("ps" is
// parameter_server's old name), else data_parallel.compression, which validate() then refuses
// for a strategy that does not compress, naming the ones that do.
std::string compression_key_for(std::string_view strategy);

// Keys set away from their defaults that the chosen strategy does not read, e.g.
// parameter_server.consistency = "ssp" with parallel.strategy = "data_parallel", and the notes of
// old key names (Config::notes): one sentence each, for a
// warning at the start of a run (not an error: a sweep's `--modes allreduce,...` runs a
// parameter-server config as allreduce on purpose).
std::vector<std::string> ignored_settings(const Config& config);

// The config as TOML, every key written with a comment giving its meaning and accepted values;
// parse_config(to_toml(c)) == c.
std::string to_toml(const Config& config);

// "section.key" of every accepted key, in table order (old names not included).
std::vector<std::string> config_keys();

// The key an assignment's "section.key" sets: the new name for an old one
// ("data_parallel.bucket_bytes" -> "data_parallel.bucket_bytes"), else the name itself.
std::string canonical_key(std::string_view name);

}  // namespace dtrain::train
