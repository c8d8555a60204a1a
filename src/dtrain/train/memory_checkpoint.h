// Tier 1 of two-tier checkpointing: the newest checkpoint of a run kept in shared memory (a file on
// tmpfs, /dev/shm by default), which outlives the process but not the machine. Multi-level
// checkpointing (SCR, Moody et al. SC'10) and Gemini (Wang et al. SOSP'23) do the same: most
// failures kill a process, not a machine, so a checkpoint in memory every step and one on disk
// every few minutes lose at most a step to the first kind and minutes to the second.
//
// Why not a file per checkpoint on tmpfs: a new file is fresh pages each time, the encode would
// need a buffer of its own and the old file's pages are freed again. Here the file is mapped once
// and holds two slots, reused in turn; a save encodes the checkpoint (checkpoint.h's file layout,
// CRC-32 included) straight into the older slot:
//   cost of a save = one sizing pass over the tables + one copy of parameters, buffers and
//   optimizer state (B bytes) + one CRC-32 pass over B: about 0.3 ms per MB here, no system call.
//
// Layout of <folder>/dtrain-<uid>-<hash of the run folder>.ckpt:
//   [0, 4096)  header: "DTRAINMC", u32 version, u32 0, u64 slot capacity C,
//              u64 sequence[2] (0: empty or being written), u64 bytes[2], the run folder's path
//   4096 + s C slot s (s = 0, 1): a checkpoint file image of bytes[s] bytes
// A save sets its slot's sequence to 0, writes the image, then publishes the next sequence number
// (release order): a process killed inside a save leaves that slot at 0 and the other slot whole.
// The space is reserved with posix_fallocate when the file is made, so that a full tmpfs is a
// warning at the start instead of a SIGBUS in the middle of a save.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "dtrain/train/checkpoint.h"
#include "dtrain/train/checkpoint_dir.h"

namespace dtrain::train {

class MemoryCheckpoint {
 public:
  // The memory tier of run folder `run_dir` under `folder` (train.memory_checkpoint_folder). Opens
  // nothing yet.
  MemoryCheckpoint(const std::string& run_dir, const std::string& folder);
  ~MemoryCheckpoint();  // unmaps; the file stays for a restart
  MemoryCheckpoint(const MemoryCheckpoint&) = delete;
  MemoryCheckpoint& operator=(const MemoryCheckpoint&) = delete;

  // The file that holds the tier (whether or not it exists).
  const std::string& path() const { return path_; }

  // Saves `checkpoint` into the older slot. The first save (and one whose image outgrows the
  // slots) makes the file; CheckpointError when it cannot (no room on the tmpfs: the message
  // names the bytes), after which the tier is off and later saves return at once.
  void save(const Checkpoint& checkpoint);
  bool off() const { return off_; }

  // The newest slot that holds a complete checkpoint which verifies, named "<path>#slot<s>";
  // nullopt when the file is missing, belongs to another run folder or holds no good slot (a
  // damaged slot warns and the other is tried). `keep`: as read_checkpoint's.
  std::optional<VerifiedCheckpoint> newest(Keep keep = Keep::kAll) const;

  // Whether the file is this run's and a slot is complete (reads the header only).
  bool holds_any() const;

  // Deletes the file (a finished run, or a stop whose disk checkpoint is newer).
  void remove();

 private:
  void map_for_writing(std::size_t slot_bytes);
  void unmap();

  std::string run_dir_;
  std::string path_;
  char* base_ = nullptr;  // the mapping, when open for writing
  std::size_t mapped_bytes_ = 0;
  bool off_ = false;
};

// The newest checkpoint of a run over both tiers: `disk` (checkpoints/) and, when `memory` is
// given, its memory tier; the memory slot wins only when it is strictly newer (same order as
// CheckpointDir's file names: epoch, then inside an epoch, then step). CheckpointError as
// CheckpointDir::newest_good when neither tier holds a good checkpoint.
// `keep`: as read_checkpoint's.
VerifiedCheckpoint newest_checkpoint(const CheckpointDir& disk, const MemoryCheckpoint* memory,
                                     Keep keep = Keep::kAll);

// Whether checkpoints/ or the memory tier holds anything to resume from.
bool has_any_checkpoint(const CheckpointDir& disk, const MemoryCheckpoint* memory);

}  // namespace dtrain::train
