// A fixed pool of threads for intra-operation parallelism (splitting one GEMM or one element-wise
// pass into per-thread slices).
//
// run(n, fn) calls fn(0) ... fn(n-1), task i on thread i % threads(), the calling thread taking
// task 0's share, and returns when all are done; the first exception is rethrown.
//
// Hand-off cost matters: an MLP step at batch 128 is ~1 ms with ~15 parallel regions. So workers
// spin (with the CPU's pause hint) for about 200 us after a job before sleeping on a condition
// variable, the caller notifies only when a worker actually sleeps, and the caller waits for the
// workers by spinning, not with sched_yield (a system call per iteration).
//
// run() may be called from several threads at once (ranks that are threads share the process-wide
// pool) and from inside a task: a caller that finds the pool busy runs its tasks inline, serially,
// instead of waiting, so nothing deadlocks and results do not depend on who got the pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dtrain {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task) for task in [0, tasks); tasks are dealt round-robin, task t on thread t %
  // threads().
  void run(int tasks, const std::function<void(int task)>& fn);

  // Splits [0, n) into threads() contiguous ranges of at least `grain` items and runs
  // fn(begin, end) on each; runs inline when n < 2 * grain.
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t begin, std::int64_t end)>& fn);

 private:
  void worker_loop(int index);
  void run_share(int thread_index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};  // workers blocked on wake_
  std::atomic<bool> stopping_{false};
  std::atomic<bool> busy_{false};  // a job is in flight; other callers run inline
  const std::function<void(int)>* job_ = nullptr;
  int job_tasks_ = 0;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// The pool used by tensor kernels: the calling thread's own pool while a ScopedComputePool is
// alive on it, else the process-wide pool sized by set_compute_threads (default 1, or
// DTRAIN_THREADS).
ThreadPool& compute_pool();
void set_compute_threads(int threads);
int compute_threads();

// Gives the calling thread its own compute pool of `threads` threads for the scope's lifetime.
// Ranks that are threads of one process each hold one, so that one rank's GEMM never runs inline
// because another rank holds the shared pool (which would make ranks unequally fast).
class ScopedComputePool {
 public:
  explicit ScopedComputePool(int threads);
  ~ScopedComputePool();
  ScopedComputePool(const ScopedComputePool&) = delete;
  ScopedComputePool& operator=(const ScopedComputePool&) = delete;

 private:
  ThreadPool pool_;
  ThreadPool* previous_;
};

}  // namespace dtrain
