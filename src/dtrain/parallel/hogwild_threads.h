// Thread plumbing shared by the sparse and dense Hogwild! loops (internal to parallel/).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/parallel/hogwild.h"

namespace dtrain::parallel::hogwild_detail {

// The first index of part `part` of `count` near-equal parts of [0, n) (sizes differ by <= 1).
inline std::int64_t part_begin(std::int64_t n, int count, int part) {
  return n / count * part + std::min<std::int64_t>(part, n % count);
}

// Hands out [0, n) in consecutive chunks of `chunk` indices to whichever thread asks next: a thread
// that the OS descheduled for a while simply takes fewer chunks, so the epoch does not wait for
// it (static shards would). With one thread the chunks come in order, 0, 1, 2, ...
class ChunkCounter {
 public:
  struct Range {
    std::int64_t begin = 0;
    std::int64_t end = 0;
    bool empty() const { return begin >= end; }
    std::int64_t size() const { return end - begin; }
  };
  // Starts at index `start` (a resume inside an epoch: [0, start) was trained before).
  ChunkCounter(std::int64_t n, std::int64_t chunk, std::int64_t start = 0)
      : n_(n), chunk_(chunk), next_(start) {}
  // The next chunk, empty once all are taken. Relaxed: the chunks' data was written before the
  // threads started, and the counter orders nothing else.
  Range next() {
    const std::int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    return {std::min(begin, n_), std::min(begin + chunk_, n_)};
  }
  std::int64_t size() const { return n_; }
  // The indices handed out so far: [0, taken()). Exact while no thread claims (a pause).
  std::int64_t taken() const { return std::min(next_.load(std::memory_order_relaxed), n_); }

 private:
  std::int64_t n_;
  std::int64_t chunk_;
  std::atomic<std::int64_t> next_{0};
};

// Where the threads of an epoch meet for a checkpoint inside it (docs/HOGWILD.md): thread 0 asks
// for a pause after one of its steps; every thread checks at each step boundary (before claiming
// its next chunk) and waits there; a thread that found no chunk left leaves, so it is not waited
// for. When every thread still working has arrived, nothing is claimed or being trained: thread 0
// runs the snapshot alone, then releases them. Every wait has a deadline (a thread stuck in a step
// fails the epoch with an error naming it rather than hanging). Cost when no pause is asked: one
// relaxed load per step.
class PauseMeeting {
 public:
  PauseMeeting(int threads, std::chrono::milliseconds timeout)
      : active_(threads), timeout_(timeout) {}
  void request() { requested_.store(true, std::memory_order_relaxed); }
  bool requested() const { return requested_.load(std::memory_order_relaxed); }
  // Thread t at a step boundary with a pause requested. Thread 0 waits for the others, runs
  // `snapshot` and releases them (its exception, if any, is rethrown to thread 0 alone).
  template <typename Fn>
  void meet(int t, Fn&& snapshot) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    ++arrived_;
    cv_.notify_all();
    if (t != 0) {
      const std::int64_t generation = generation_;
      if (!cv_.wait_until(lock, deadline, [&] { return generation_ != generation; })) {
        throw Error(fmt::format(
            "hogwild: thread {} waited {:.1f} s at a checkpoint pause for thread 0, which waits "
            "for every thread's step and then hands the snapshot to the checkpoint writer (after "
            "the previous file is written); a thread or the disk is stuck (raise "
            "parallel.comm_timeout_seconds if a step or a write is only slow)",
            t, std::chrono::duration<double>(timeout_).count()));
      }
      return;
    }
    if (!cv_.wait_until(lock, deadline, [&] { return arrived_ >= active_; })) {
      throw Error(fmt::format(
          "hogwild: thread 0 waited {:.1f} s at a checkpoint pause for {} of {} thread(s) to "
          "finish their step; a thread is stuck (raise parallel.comm_timeout_seconds if a step is "
          "only slow)",
          std::chrono::duration<double>(timeout_).count(), active_ - arrived_, active_));
    }
    std::exception_ptr error;
    try {
      snapshot();
    } catch (...) {
      error = std::current_exception();
    }
    requested_.store(false, std::memory_order_relaxed);
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    if (error) std::rethrow_exception(error);
  }
  // Thread 0 ended by an error outside a snapshot: the threads waiting for it at a pause go on
  // (and see the epoch stopped) instead of waiting out their deadline.
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    requested_.store(false, std::memory_order_relaxed);
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  }
  // A thread that has no chunk left: the meeting no longer waits for it.
  void leave() {
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
    cv_.notify_all();
  }

 private:
  std::atomic<bool> requested_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  int active_;
  int arrived_ = 0;
  std::int64_t generation_ = 0;
  std::chrono::milliseconds timeout_;
};

// How an epoch with pauses ended: stopped at `position` by a pause's at_pause.
struct EpochEnd {
  std::chrono::steady_clock::time_point began;  // when the threads started: a pause's clock
  std::atomic<bool> stopped{false};
  std::int64_t position = 0;  // written by thread 0 inside the meeting, read after the join
};

// The loop of thread t over an epoch's chunks: `train(range)` trains one. Between two chunks it
// meets the others when a pause is asked (thread 0 asks `pause->due()` after each of its steps)
// and stops when a pause ended the epoch. Returns the samples it trained.
template <typename Train>
std::int64_t train_chunks(int t, ChunkCounter& chunks, PauseMeeting& meeting,
                          const HogwildPause* pause, EpochEnd& end, Train&& train) {
  // Leaves the meeting however the loop ends. An error (a step's or the snapshot's) also stops the
  // other threads at their next boundary, so that none waits out its deadline at a pause for a
  // thread that is gone; the error itself reaches the caller after the join.
  struct Leave {
    int t;
    PauseMeeting& meeting;
    EpochEnd& end;
    int exceptions = std::uncaught_exceptions();
    ~Leave() {
      if (std::uncaught_exceptions() > exceptions) {
        end.stopped.store(true, std::memory_order_relaxed);
        if (t == 0) meeting.release();
      }
      meeting.leave();
    }
  } leave{t, meeting, end};
  std::int64_t done = 0;
  while (true) {
    if (meeting.requested()) {
      meeting.meet(t, [&] {
        const std::int64_t position = chunks.taken();
        // Due at the epoch's last step: the epoch's end is the caller's checkpoint.
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - end.began).count();
        if (position < chunks.size() && pause->at_pause(position, seconds)) {
          end.position = position;
          end.stopped.store(true, std::memory_order_relaxed);
        }
      });
    }
    if (end.stopped.load(std::memory_order_relaxed)) break;
    const ChunkCounter::Range chunk = chunks.next();
    if (chunk.empty()) break;
    train(chunk);
    done += chunk.size();
    if (t == 0 && pause != nullptr && pause->due()) meeting.request();
  }
  return done;
}

// CPU seconds the calling thread has run: with more threads than free cores, wall time mixes in
// waiting for a core, while updates per CPU second show what contention between threads costs.
inline double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Runs fn(t) on threads t = 0 .. count - 1 (fn(0) on the calling thread) and rethrows the first
// exception once all have finished. Thread start and join order every access of the threads
// after what the caller did before, and before what it does after.
template <typename Fn>
void run_on_threads(int count, Fn&& fn) {
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&](int t) {
    try {
      fn(t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(count - 1));
  for (int t = 1; t < count; ++t) threads.emplace_back(guarded, t);
  guarded(0);
  for (auto& thread : threads) thread.join();
  if (error) std::rethrow_exception(error);
}

// An evaluation {loss, accuracy} over n samples from per-thread sums of loss and of correct
// predictions; zeros when n == 0.
template <typename Evaluation>
Evaluation mean_over_threads(const std::vector<double>& loss_sums,
                             const std::vector<std::int64_t>& correct, std::int64_t n) {
  Evaluation result;
  if (n == 0) return result;
  double loss = 0.0;
  std::int64_t right = 0;
  for (std::size_t t = 0; t < loss_sums.size(); ++t) {
    loss += loss_sums[t];
    right += correct[t];
  }
  result.loss = loss / static_cast<double>(n);
  result.accuracy = static_cast<double>(right) / static_cast<double>(n);
  return result;
}

}  // namespace dtrain::parallel::hogwild_detail
