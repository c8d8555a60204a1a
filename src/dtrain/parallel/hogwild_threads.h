// Thread plumbing shared by the sparse and dense Hogwild! loops (internal to parallel/).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

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
  ChunkCounter(std::int64_t n, std::int64_t chunk) : n_(n), chunk_(chunk) {}
  // The next chunk, empty once all are taken. Relaxed: the chunks' data was written before the
  // threads started, and the counter orders nothing else.
  Range next() {
    const std::int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    return {std::min(begin, n_), std::min(begin + chunk_, n_)};
  }

 private:
  std::int64_t n_;
  std::int64_t chunk_;
  std::atomic<std::int64_t> next_{0};
};

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
