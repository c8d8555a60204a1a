#include "dtrain/base/thread_pool.h"

#include <algorithm>
#include <memory>

#include "dtrain/base/env.h"
#include "dtrain/base/error.h"

namespace dtrain {
namespace {

// About 200 us of polling at ~40 ns per pause-and-load.
constexpr int kSpinsBeforeSleep = 5000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw ConfigError(fmt::format("thread count must be >= 1, got {}", threads));
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_share(int thread_index) {
  const int stride = threads();
  for (int task = thread_index; task < job_tasks_; task += stride) {
    try {
      (*job_)(task);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    std::uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; spin < kSpinsBeforeSleep && now == seen; ++spin) {
      cpu_relax();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      // Dekker-style hand-off with run(): this thread announces itself in sleepers_ before its
      // last look at generation_, and run() bumps generation_ before it reads sleepers_ (all
      // sequentially consistent), so either run() sees the sleeper and notifies, or the sleeper
      // sees the new generation and does not wait.
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stopping_.load(std::memory_order_acquire)) return;
    run_share(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int tasks, const std::function<void(int)>& fn) {
  if (tasks <= 0) return;
  bool expected = false;
  if (workers_.empty() || tasks == 1 ||
      !busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
    for (int task = 0; task < tasks; ++task) fn(task);
    return;
  }
  job_ = &fn;
  job_tasks_ = tasks;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes the job, and orders before the sleepers_ read
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  run_share(0);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    // A worker that was descheduled may take a while; stop burning the core it needs after a bit.
    if (spin < kSpinsBeforeSleep) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    error = error_;
    error_ = nullptr;
  }
  busy_.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t parts = std::min<std::int64_t>(threads(), n / grain);
  if (parts <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  run(static_cast<int>(parts), [&](int part) {
    const std::int64_t begin = n * part / parts;
    const std::int64_t end = n * (part + 1) / parts;
    fn(begin, end);
  });
}

namespace {
std::mutex g_pool_mutex;
std::unique_ptr<ThreadPool> g_pool;

ThreadPool& pool_locked() {
  if (!g_pool) {
    g_pool = std::make_unique<ThreadPool>(static_cast<int>(env::get_int("DTRAIN_THREADS", 1)));
  }
  return *g_pool;
}
}  // namespace

// Set by ScopedComputePool: this thread's own pool, which compute_pool() prefers.
static thread_local ThreadPool* t_scoped_pool = nullptr;

ThreadPool& compute_pool() {
  if (t_scoped_pool != nullptr) return *t_scoped_pool;
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  return pool_locked();
}

void set_compute_threads(int threads) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (g_pool && g_pool->threads() == threads) return;
  g_pool = std::make_unique<ThreadPool>(threads);
}

int compute_threads() {
  if (t_scoped_pool != nullptr) return t_scoped_pool->threads();
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  return pool_locked().threads();
}

ScopedComputePool::ScopedComputePool(int threads) : pool_(threads), previous_(t_scoped_pool) {
  t_scoped_pool = &pool_;
}

ScopedComputePool::~ScopedComputePool() { t_scoped_pool = previous_; }

}  // namespace dtrain
