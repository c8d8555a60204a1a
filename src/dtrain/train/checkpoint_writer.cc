#include "dtrain/train/checkpoint_writer.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/timer.h"

namespace dtrain::train {

CheckpointWriter::CheckpointWriter(CheckpointDir& dir) : dir_(dir), thread_([this] { loop(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_ && !pending_; });
    stopping_ = true;
    if (error_) {
      try {
        std::rethrow_exception(error_);
      } catch (const std::exception& e) {
        log::warn("checkpoint write failed: {}", e.what());
      }
    }
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointWriter::rethrow_or_warn_locked(std::unique_lock<std::mutex>& lock) {
  if (!error_) return;
  std::exception_ptr error = std::exchange(error_, nullptr);
  if (error_fatal_) {
    lock.unlock();
    try {
      std::rethrow_exception(error);
    } catch (const CheckpointError& e) {
      // The run's last checkpoint: the run ends here, and a resume continues it.
      throw CheckpointError(fmt::format(
          "{}; once that is mended (free space, for a full disk), continue with --resume",
          e.what()));
    }
  }
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    log::warn("{}; training goes on, and the next checkpoint is tried when due", e.what());
  }
}

void CheckpointWriter::submit(Checkpoint checkpoint, bool fatal) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_ && !pending_; });
  rethrow_or_warn_locked(lock);
  if (!lock.owns_lock()) lock.lock();
  pending_ = std::move(checkpoint);
  pending_fatal_ = fatal;
  lock.unlock();
  cv_.notify_all();
}

void CheckpointWriter::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_ && !pending_; });
  rethrow_or_warn_locked(lock);
}

std::optional<std::pair<std::string, double>> CheckpointWriter::last_write() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_write_;
}

void CheckpointWriter::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || pending_.has_value(); });
    if (!pending_) return;  // stopping with nothing left
    Checkpoint checkpoint = std::move(*pending_);
    const bool fatal = pending_fatal_;
    pending_.reset();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    std::string path;
    Stopwatch clock;
    try {
      path = dir_.save(checkpoint);
    } catch (...) {
      error = std::current_exception();
    }
    const double seconds = clock.seconds();
    lock.lock();
    busy_ = false;
    if (error) {
      error_ = error;
      error_fatal_ = fatal;
    } else {
      last_write_ = {path, seconds};
    }
    cv_.notify_all();
  }
}

}  // namespace dtrain::train
