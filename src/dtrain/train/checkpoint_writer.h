// Writes checkpoints on a thread of their own, from an in-memory snapshot, so that training goes
// on while the file is encoded, checksummed and written (CheckFreq, Mohan et al. FAST 2021: the
// run stalls only for the snapshot, a copy of the parameters and optimizer state).
//
// At most one write is in flight: submit() first waits for the previous one (a checkpoint is
// never queued behind a slower one, and memory holds at most two snapshots: the one being written
// and the one being taken). A write that fails is reported by the next submit() or by wait():
// as a warning when `fatal` was false at its submit (checkpoints inside an epoch: the previous
// good one is kept and training goes on), as the CheckpointError itself otherwise (the run's last
// checkpoint). Cost: the snapshot is O(parameters + optimizer state) memory copies on the training
// thread; encode + CRC + write are off it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "dtrain/train/checkpoint.h"
#include "dtrain/train/checkpoint_dir.h"

namespace dtrain::train {

class CheckpointWriter {
 public:
  explicit CheckpointWriter(CheckpointDir& dir);
  ~CheckpointWriter();  // waits for the write in flight; its error is only logged
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Hands `checkpoint` to the writer thread, after the previous write finished.
  void submit(Checkpoint checkpoint, bool fatal);
  // Waits for the write in flight; rethrows its error when it was submitted as fatal.
  void wait();

  // The last finished write: its path and seconds (encode + CRC + write + rename), or nullopt.
  std::optional<std::pair<std::string, double>> last_write() const;

 private:
  void loop();
  void rethrow_or_warn_locked(std::unique_lock<std::mutex>& lock);

  CheckpointDir& dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Checkpoint> pending_;
  bool pending_fatal_ = false;
  bool busy_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  bool error_fatal_ = false;
  std::optional<std::pair<std::string, double>> last_write_;
  std::thread thread_;
};

}  // namespace dtrain::train
