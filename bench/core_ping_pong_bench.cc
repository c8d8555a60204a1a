// Round trip of one cache line between two threads bound to the first two CPUs this process may
// use: thread A writes i to line a and waits to see i on line b; thread B waits for i on a and
// writes it to b. One iteration = two cross-core line transfers, the unit every shared-memory
// message pays (the inproc transport's small messages, Hogwild!'s shared weights).
//
// Why it is here: on the project's VM this figure has two states that last seconds to minutes,
// ~105 ns and ~510 ns (2026-11-21), and they explain runs of `dtrain bench collectives` and of
// Hogwild! that are 2-5x slower for a whole process (docs/PERFORMANCE.md). Run it next to a
// measurement to tell the two apart.
// Run: build/bench/core_ping_pong_bench
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace {

struct alignas(64) Line {
  std::atomic<std::int64_t> value{0};
};

// The n-th CPU of this process's affinity mask, or -1.
int nth_allowed_cpu(int n) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed) && n-- == 0) return cpu;
  }
  return -1;
}

void bind_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
}

void BM_CoreRoundTrip(benchmark::State& state) {
  // Read once: the benchmark runs this function several times, and the first run binds the
  // calling thread.
  static const int first = nth_allowed_cpu(0);
  static const int second = nth_allowed_cpu(1);
  if (second < 0) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  Line a;
  Line b;
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    bind_to(second);
    std::int64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const std::int64_t now = a.value.load(std::memory_order_acquire);
      if (now != seen) {
        seen = now;
        b.value.store(now, std::memory_order_release);
      }
    }
  });
  bind_to(first);
  std::int64_t i = 0;
  for (auto _ : state) {
    a.value.store(++i, std::memory_order_release);
    while (b.value.load(std::memory_order_acquire) != i) {
    }
  }
  stop.store(true);
  partner.join();
}

BENCHMARK(BM_CoreRoundTrip)->MinTime(0.2);

}  // namespace
