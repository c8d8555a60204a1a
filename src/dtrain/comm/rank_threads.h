// What the thread of a rank that is a thread (spawn_ranks, spawn_process_ranks) needs so that a
// failure elsewhere in its world ends it at the deadline, not whenever its own work ends:
//
//   sleep_unless_aborted   a sleep (an injected straggler's delay) that ends as soon as any rank
//                          of this thread's world fails or returns; the rank's next message then
//                          fails at once, naming the rank that failed
//   detached_rank_threads  rank threads that spawn_ranks stopped waiting for after an error
//                          (spawn_ranks.h): still running, so the process must end without
//                          destroying what they may use (std::_Exit after printing the error)
//
// A thread that is no rank (the main thread, a compute pool's worker) sleeps for the full time.
#pragma once

#include <chrono>
#include <memory>

namespace dtrain::comm {

// Raised once when a rank of one world fails or exits; rank threads wait on it.
class WorldEndSignal {
 public:
  void raise();
  bool raised() const;
  // Sleeps until `deadline` or until raise(); true when the whole sleep ran.
  bool sleep_until(std::chrono::steady_clock::time_point deadline) const;

 private:
  struct State;
  std::shared_ptr<State> state_ = make_state();
  static std::shared_ptr<State> make_state();
};

// Binds the calling thread to `signal` (spawn_ranks does this on each rank's thread); an empty
// pointer unbinds it.
void bind_rank_thread(std::shared_ptr<const WorldEndSignal> signal);

// Sleeps `duration`, or less when a rank of the calling thread's world has failed or returned
// meanwhile: false then (the caller goes on; its next message fails naming the rank).
bool sleep_unless_aborted(std::chrono::duration<double> duration);

// Rank threads left running by spawn_ranks after an error (they did not end within its grace
// period). Non-zero: end the process with std::_Exit once the error is printed.
int detached_rank_threads();

namespace rank_threads_detail {
void add_detached(int delta);
}  // namespace rank_threads_detail

}  // namespace dtrain::comm
