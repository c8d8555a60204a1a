#include "dtrain/base/stop_request.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace dtrain {
namespace {

std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");
std::atomic<const char*> sigint_note{nullptr};
static_assert(std::atomic<const char*>::is_always_lock_free, "the handler reads the note");

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  const bool first = requested.compare_exchange_strong(none, signal);
  const char* note = sigint_note.load();
  if (first && signal == SIGINT && note != nullptr) {
    // write(2) and strlen are async-signal-safe; a short write is left as it is.
    const ssize_t written = ::write(STDERR_FILENO, note, std::strlen(note));
    (void)written;
  }
  std::signal(signal, SIG_DFL);  // a second one ends the process
}

}  // namespace

void install_stop_handlers() {
  static const bool installed = [] {
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);
    // A closed terminal or a dropped ssh session: the run would die without a checkpoint (or, under
    // the supervisor, lose its supervisor and train on unwatched), so it stops as on SIGTERM.
    // Unless the process started with SIGHUP ignored (nohup, `trap '' HUP`): whoever started it
    // asked it to outlive its terminal, so it stays ignored (and a supervisor's children, which
    // posix_spawn gives the ignored signals of their parent, keep it ignored too).
    struct sigaction current {};
    const bool ignored = sigaction(SIGHUP, nullptr, &current) == 0 &&
                         (current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_IGN;
    if (!ignored) std::signal(SIGHUP, on_stop_signal);
    return true;
  }();
  (void)installed;
}

void set_sigint_note(const char* line) { sigint_note.store(line); }

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
