// The handle of an asynchronous operation (c10d's Work): wait with a timeout, poll, and get the
// error it ended with. Copies share one state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace dtrain::comm {

class Work {
 public:
  // A new, unfinished operation described by `what` (e.g. "allreduce #7"), used in timeouts.
  explicit Work(std::string what);

  bool done() const;
  // Blocks until the operation ends, then rethrows its error if it failed. Throws
  // CommTimeoutError if it has not ended within `timeout` (the operation keeps running).
  void wait(std::chrono::milliseconds timeout) const;
  // The error it ended with; null while running or after success.
  std::exception_ptr error() const;
  // When finish() was called (the epoch of steady_clock while running). Async collectives run one
  // at a time in submission order, so a Work started when its predecessor finished or when it was
  // submitted, whichever is later: what a trace needs.
  std::chrono::steady_clock::time_point finished_at() const;

  // Producer side: ends the operation, with `error` null on success. Called once.
  void finish(std::exception_ptr error) const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    std::chrono::steady_clock::time_point finished_at{};
    std::string what;
  };
  std::shared_ptr<State> state_;
};

}  // namespace dtrain::comm
