#include "dtrain/comm/rank_threads.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace dtrain::comm {
namespace {

thread_local std::shared_ptr<const WorldEndSignal> bound_signal;
std::atomic<int> detached{0};

}  // namespace

struct WorldEndSignal::State {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool raised = false;  // guarded by mu
};

std::shared_ptr<WorldEndSignal::State> WorldEndSignal::make_state() {
  return std::make_shared<State>();
}

void WorldEndSignal::raise() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->raised = true;
  }
  state_->cv.notify_all();
}

bool WorldEndSignal::raised() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->raised;
}

bool WorldEndSignal::sleep_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  return !state_->cv.wait_until(lock, deadline, [&] { return state_->raised; });
}

void bind_rank_thread(std::shared_ptr<const WorldEndSignal> signal) {
  bound_signal = std::move(signal);
}

bool sleep_unless_aborted(std::chrono::duration<double> duration) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(duration);
  if (!bound_signal) {
    std::this_thread::sleep_until(deadline);
    return true;
  }
  return bound_signal->sleep_until(deadline);
}

int detached_rank_threads() { return detached.load(); }

namespace rank_threads_detail {
void add_detached(int delta) { detached.fetch_add(delta); }
}  // namespace rank_threads_detail

}  // namespace dtrain::comm
