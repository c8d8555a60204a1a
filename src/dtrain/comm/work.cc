#include "dtrain/comm/work.h"

#include <fmt/format.h>

#include "dtrain/comm/comm_error.h"

namespace dtrain::comm {

Work::Work(std::string what) : state_(std::make_shared<State>()) { state_->what = std::move(what); }

bool Work::done() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

void Work::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
    throw CommTimeoutError(fmt::format("{}: Work::wait timed out after {} ms (still running)",
                                       state_->what, timeout.count()));
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

std::exception_ptr Work::error() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->error;
}

std::chrono::steady_clock::time_point Work::finished_at() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->finished_at;
}

void Work::finish(std::exception_ptr error) const {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->finished_at = now;
    state_->error = std::move(error);
    state_->done = true;
  }
  state_->cv.notify_all();
}

}  // namespace dtrain::comm
