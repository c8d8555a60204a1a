// Wall-clock timing on the monotonic clock.
#pragma once

#include <chrono>

namespace dtrain {

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void reset() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double micros() const { return seconds() * 1e6; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// Seconds since an arbitrary fixed point of this process (for trace timestamps).
double monotonic_seconds();

}  // namespace dtrain
