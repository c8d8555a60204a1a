#include "dtrain/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain {
namespace {

TEST(ThreadPool, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int tasks : {0, 1, 2, 5, 17}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(tasks));
      pool.run(tasks, [&](int t) { hits[static_cast<std::size_t>(t)]++; });
      for (int t = 0; t < tasks; ++t) EXPECT_EQ(hits[static_cast<std::size_t>(t)], 1);
    }
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeExactly) {
  ThreadPool pool(2);
  for (std::int64_t n : {0, 1, 7, 100, 10001}) {
    std::vector<int> hits(static_cast<std::size_t>(n), 0);
    pool.parallel_for(n, 3, [&](std::int64_t begin, std::int64_t end) {
      for (auto i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)]++;
    });
    EXPECT_EQ(std::accumulate(hits.begin(), hits.end(), 0), n);
    for (int h : hits) EXPECT_EQ(h, 1);
  }
}

TEST(ThreadPool, RethrowsTheTaskError) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(4,
                        [](int t) {
                          if (t == 3) throw DataError("task 3 failed");
                        }),
               DataError);
  // The pool stays usable after an error.
  std::atomic<int> count{0};
  pool.run(4, [&](int) { count++; });
  EXPECT_EQ(count, 4);
}

TEST(ThreadPool, ManySmallJobsBackToBack) {
  ThreadPool pool(2);
  std::atomic<long> total{0};
  for (int i = 0; i < 20000; ++i) pool.run(2, [&](int t) { total += t + 1; });
  EXPECT_EQ(total, 20000L * 3);
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(ThreadPool(0), ConfigError); }

}  // namespace
}  // namespace dtrain

namespace dtrain {
namespace {

TEST(ThreadPool, ConcurrentAndNestedCallersRunInline) {
  ThreadPool pool(2);
  std::atomic<long> total{0};
  auto job = [&] {
    for (int i = 0; i < 2000; ++i) {
      pool.run(3, [&](int t) {
        // A nested call finds the pool busy and runs inline.
        pool.run(2, [&](int u) { total += u; });
        total += t;
      });
    }
  };
  std::thread a(job), b(job);
  a.join();
  b.join();
  // Per outer call: tasks 0+1+2 plus three nested calls of 0+1.
  EXPECT_EQ(total, 2L * 2000 * (3 + 3));
}

TEST(ScopedComputePool, GivesThisThreadItsOwnPoolUntilTheScopeEnds) {
  set_compute_threads(1);
  ThreadPool* shared = &compute_pool();
  {
    ScopedComputePool scoped(2);
    EXPECT_NE(&compute_pool(), shared);
    EXPECT_EQ(compute_threads(), 2);
    // Another thread still sees the process-wide pool.
    ThreadPool* seen_elsewhere = nullptr;
    std::thread other([&] { seen_elsewhere = &compute_pool(); });
    other.join();
    EXPECT_EQ(seen_elsewhere, shared);
    {
      ScopedComputePool inner(1);
      EXPECT_EQ(compute_threads(), 1);
    }
    EXPECT_EQ(compute_threads(), 2);
  }
  EXPECT_EQ(&compute_pool(), shared);
  EXPECT_EQ(compute_threads(), 1);
}

}  // namespace
}  // namespace dtrain
