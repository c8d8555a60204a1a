// Whether a run fits in the memory this process has left, decided before anything is allocated:
// a model too large fails with the bytes of each part and the bytes available, not with
// std::bad_alloc or the OOM killer halfway through building it.
//
// What a process holds, per replica of the model (threads that are ranks each hold one):
//   parameters   P floats (nn::ParamStore's flat buffer)
//   gradients    P floats (its twin)
//   buffers      batch-norm running statistics (nn::ModelSize::buffers)
//   optimizer    P floats per state vector: sgd and lars with momentum 1 (velocity), adam and adamw
//   2
//                (first and second moments), plain sgd 0; ZeRO-1 keeps 1/world of it per rank
//   checkpoint   in the process that writes the checkpoints (rank 0's): while one is written,
//                its snapshot (parameters, buffers and the optimizer state, ZeRO-1's gathered
//                whole) and its encoded bytes, 2 copies; with the memory tier
//                (train.memory_checkpoint_every_steps) its two slots on tmpfs, 2 more
// The data already loaded is reported beside them but not added: it is in memory already, so the
// available figure (base/memory_info.h: MemAvailable or the cgroup's limit, whichever is smaller)
// has counted it as used. Activations, scratch and communication buffers are not counted: the
// estimate is a lower bound, so a refusal is certain, an acceptance only likely.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtrain/base/memory_info.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/train/config.h"
#include "dtrain/train/run_data.h"

namespace dtrain::train {

struct MemoryNeed {
  std::int64_t parameters = 0;  // elements of one replica
  std::int64_t buffers = 0;     // untrained elements of one replica
  std::string optimizer = "sgd";
  int optimizer_copies = 0;     // state vectors of P floats (optimizer_state_copies)
  int optimizer_shards = 1;     // ZeRO-1: the state split over this many ranks
  int replicas = 1;             // replicas held by this process
  int world = 1;                // ranks of the whole run (for the advice)
  std::int64_t data_bytes = 0;  // already loaded (reported, not added)
  bool gradients = true;        // false: updates without a gradient buffer (Hogwild!'s linear
                                // models)
  int checkpoint_copies = 0;    // copies of one checkpoint this process holds (above); 0: it
                                // writes none
  bool memory_tier = false;     // 2 of checkpoint_copies are the memory tier's slots
};

// Bytes of each part for all replicas of this process; total = the sum of the five.
struct MemoryParts {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t buffers = 0;
  std::int64_t optimizer = 0;
  std::int64_t checkpoint = 0;  // all of the checkpoint's copies (one replica's, unsharded)
  std::int64_t total = 0;
};

// The checkpoint copies of a process that writes checkpoints under `config`: 2 (snapshot and
// encoded bytes), 4 with the memory tier.
int checkpoint_copies(const Config& config);

// State vectors of P floats: sgd/lars 1 with momentum > 0 else 0, adam/adamw 2.
int optimizer_state_copies(const std::string& optimizer, double momentum);

// The bytes of `need`; saturates at INT64_MAX.
MemoryParts memory_parts(const MemoryNeed& need);

// The one-line error when `need` does not fit in `available` (each part in bytes, the total, the
// bytes available and where that figure came from, and what to do); nullopt when it fits or when
// nothing is known about the memory. Pure: tests give it numbers.
std::optional<std::string> memory_shortfall(const MemoryNeed& need,
                                            const AvailableMemory& available);

// The bytes of the loaded training and test sets (images and labels).
std::int64_t run_data_bytes(const RunData& data);

// The need of `replicas` replicas of `spec` trained by `config` on `world` ranks (ZeRO-1 decided as
// the data-parallel strategy decides it), with the checkpoint's copies when this process
// `writes_checkpoints`; nullopt when the spec is not buildable (build_model then says why).
// Whether this process writes the checkpoints: not an mpirun process other than the first (from
// the launcher's environment, without initialising MPI).
bool this_process_writes_checkpoints();

std::optional<MemoryNeed> estimate_memory_need(
    const Config& config, const nn::ModelSpec& spec, int replicas, int world,
    std::int64_t data_bytes, bool writes_checkpoints = this_process_writes_checkpoints());

// estimate_memory_need against available_memory(): throws ConfigError with memory_shortfall's
// message, else returns the need (nullopt as estimate_memory_need). A few small file reads; call it
// before building the model(s).
std::optional<MemoryNeed> check_memory_budget(
    const Config& config, const nn::ModelSpec& spec, int replicas, int world,
    std::int64_t data_bytes, bool writes_checkpoints = this_process_writes_checkpoints());

// Throws ConfigError with memory_shortfall's message when `need` does not fit in
// available_memory().
void check_memory_need(const MemoryNeed& need);

}  // namespace dtrain::train
