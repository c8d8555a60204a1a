// Checkpoints: one self-verifying binary file holding everything a run needs to continue exactly
// where it stopped.
//
// Layout (all integers little-endian, floats IEEE-754 binary32 little-endian):
//   offset 0   "DTRAINCK"                 magic, 8 bytes
//          8   u32 version (= 1)
//         12   u32 flags (= 0)
//         16   u64 P                      payload bytes
//         24   payload, P bytes:
//                i64 epoch, i64 global_step, i64 optimizer_steps, u64 seed,
//                i64 sampler_epoch, i64 sampler_position
//                u32 n, then n x (str name, f64 value)                         scalars
//                u32 n, then n x (str name, u32 ndim, ndim x i64 dim, i64 offset, i64 numel,
//                                 u8 weight_decay)                             parameter table
//                the same for the buffer table
//                i64 n, n x f32                                                parameters
//                i64 n, n x f32                                                buffers
//                u32 n, then n x (str name, i64 count, count x f32)           optimizer state
//              (str = u32 length + bytes)
//   24 + P     u32 CRC-32 (zlib's crc32 values; computed by ISA-L) of bytes [0, 24 + P)
// A file is accepted only if its size is exactly 28 + P, the checksum matches and the payload
// parses to its last byte; every count is checked against the bytes left before anything is
// allocated, so a damaged or hostile file cannot make the reader allocate more than its own size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/nn/param_store.h"

namespace dtrain::train {

inline constexpr char kCheckpointMagic[8] = {'D', 'T', 'R', 'A', 'I', 'N', 'C', 'K'};
inline constexpr std::uint32_t kCheckpointVersion = 1;

// A named flat float vector of optimizer state (optim::StateTensor's content), kept as a train
// type so that the file format does not change with the optimizer's headers.
struct NamedValues {
  std::string name;
  std::vector<float> values;
  bool operator==(const NamedValues&) const = default;
};

struct Checkpoint {
  std::int64_t epoch = 0;            // completed epochs
  std::int64_t global_step = 0;      // optimizer steps taken by the run (the schedule's step)
  std::int64_t optimizer_steps = 0;  // Optimizer::steps(), for Adam's bias correction
  std::uint64_t seed = 0;
  // The sampler's position: the epoch whose order is being consumed and how many samples of it
  // were already used (0 at an epoch boundary).
  std::int64_t sampler_epoch = 0;
  std::int64_t sampler_position = 0;
  // Run-level numbers that must survive a restart (training seconds so far, best accuracy, ...).
  std::vector<std::pair<std::string, double>> scalars;
  std::vector<nn::ParamEntry> param_table;
  std::vector<nn::ParamEntry> buffer_table;
  std::vector<float> params;
  std::vector<float> buffers;
  std::vector<NamedValues> optimizer_state;

  // The scalar `name`, or `fallback` when absent.
  double scalar(const std::string& name, double fallback) const;
};

// The bytes of `checkpoint` in the layout above, checksum included.
std::string encode_checkpoint(const Checkpoint& checkpoint);
// The size of encode_checkpoint's result, and the same bytes written at `out` (exactly `size` =
// encoded_checkpoint_size bytes, else InternalError): one sizing pass over the tables, one copy of
// the floats and one CRC pass, with no allocation (the memory tier encodes into a mapped slot).
std::size_t encoded_checkpoint_size(const Checkpoint& checkpoint);
void encode_checkpoint_into(const Checkpoint& checkpoint, char* out, std::size_t size);

// What a read keeps of a checkpoint that verifies (the checks are the same): everything, or
// everything but the float arrays (params, buffers and optimizer state's values left empty): what
// the supervisor needs to name the checkpoint a restart resumes from, without a copy of the model
// and its optimizer state in its own memory before each restart.
enum class Keep { kAll, kNoFloats };

// Parses and verifies bytes read from `source` (named in errors); CheckpointError on any defect.
Checkpoint decode_checkpoint(std::string_view bytes, const std::string& source,
                             Keep keep = Keep::kAll);

// Writes atomically (see atomic_file.h): a failed write leaves the previous file at `path` intact.
// CheckpointError naming the path and the reason.
void write_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Reads and verifies `path`; CheckpointError naming the file and what is wrong.
Checkpoint read_checkpoint(const std::string& path, Keep keep = Keep::kAll);

// Checks that the checkpoint's tables and sizes describe `store`'s layout, naming the first
// tensor that differs (name, shape, offset on both sides); CheckpointError otherwise.
void check_layout(const Checkpoint& checkpoint, const nn::ParamStore& store,
                  const std::string& source);

// Copies the parameters and buffers into `store` after check_layout.
void restore_into(const Checkpoint& checkpoint, nn::ParamStore& store, const std::string& source);

// The tables, parameters and buffers of `store`, for a new checkpoint.
void capture_from(const nn::ParamStore& store, Checkpoint& checkpoint);

}  // namespace dtrain::train
