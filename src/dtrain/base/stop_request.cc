#include "dtrain/base/stop_request.h"

#include <atomic>
#include <csignal>

namespace dtrain {
namespace {

std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  requested.compare_exchange_strong(none, signal);
  std::signal(signal, SIG_DFL);  // a second one ends the process
}

}  // namespace

void install_stop_handlers() {
  static const bool installed = [] {
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);
    // A closed terminal or a dropped ssh session: the run would die without a checkpoint (or, under
    // the supervisor, lose its supervisor and train on unwatched), so it stops as on SIGTERM.
    std::signal(SIGHUP, on_stop_signal);
    return true;
  }();
  (void)installed;
}

int stop_requested() { return requested.load(std::memory_order_relaxed); }

void set_stop_request_for_test(int signal) { requested.store(signal); }

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace dtrain
