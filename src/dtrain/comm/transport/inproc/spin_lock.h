// The lock of one inproc lane (private to inproc/): critical sections are a few pointer updates
// (tens of ns), so waiting in user space beats a futex; after kSpinsBeforeYield pause
// instructions a waiter yields its core, so a holder preempted on a busy machine gets to run.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace dtrain::comm::inproc {

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

class SpinLock {
 public:
  void lock() noexcept {
    int spins = 0;
    while (flag_.exchange(true, std::memory_order_acquire)) {
      // Read-only spinning keeps the line shared until the holder releases it.
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < kSpinsBeforeYield) {
          cpu_pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 128;
  std::atomic<bool> flag_{false};
};

}  // namespace dtrain::comm::inproc
