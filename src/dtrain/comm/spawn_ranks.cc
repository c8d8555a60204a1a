#include "dtrain/comm/spawn_ranks.h"

#include <pthread.h>
#include <sched.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dtrain/base/env.h"
#include "dtrain/base/log.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/rank_threads.h"
#include "dtrain/comm/transport/inproc/world.h"

namespace dtrain::comm {
namespace {

// The same exception type as `error`, with its message prefixed by "rank r: " unless it has it.
std::exception_ptr with_rank(std::exception_ptr error, int rank) {
  const std::string prefix = fmt::format("rank {}: ", rank);
  auto prefixed = [&](const std::string& what) {
    return what.rfind(prefix, 0) == 0 ? what : prefix + what;
  };
  try {
    std::rethrow_exception(error);
  } catch (const CommTimeoutError& e) {
    return std::make_exception_ptr(CommTimeoutError(prefixed(e.what())));
  } catch (const CommError& e) {
    return std::make_exception_ptr(CommError(prefixed(e.what())));
  } catch (const ConfigError& e) {
    return std::make_exception_ptr(ConfigError(prefixed(e.what())));
  } catch (const DataError& e) {
    return std::make_exception_ptr(DataError(prefixed(e.what())));
  } catch (const ShapeError& e) {
    return std::make_exception_ptr(ShapeError(prefixed(e.what())));
  } catch (const CheckpointError& e) {
    return std::make_exception_ptr(CheckpointError(prefixed(e.what())));
  } catch (const InternalError& e) {
    return std::make_exception_ptr(InternalError(prefixed(e.what())));
  } catch (const std::bad_alloc&) {
    return error;  // kept as it is: the dtrain main explains running out of memory
  } catch (const std::exception& e) {
    return std::make_exception_ptr(CommError(prefixed(e.what())));
  } catch (...) {
    return std::make_exception_ptr(CommError(prefix + "unknown exception"));
  }
}

// Pins the calling thread to the (rank mod n)-th of the n CPUs this process may use (spawn_ranks.h
// says when).
void pin_to_cpu(int rank, int ranks, RankPinning pinning) {
  if (pinning == RankPinning::kNever) return;
  if (pinning == RankPinning::kFromEnvironment && !env::get_bool("DTRAIN_PIN_RANKS", false)) return;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2) return;
  if (pinning == RankPinning::kWhenRanksFit && ranks > CPU_COUNT(&allowed)) return;
  int target = rank % CPU_COUNT(&allowed);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || target-- != 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    return;
  }
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// What the rank threads share with spawn_ranks; owned by all of them, so that a thread left
// running after spawn_ranks returned (detached) still finds it.
struct SpawnState {
  std::shared_ptr<InprocWorld> world;
  std::shared_ptr<WorldEndSignal> ended = std::make_shared<WorldEndSignal>();
  std::function<void(Communicator&)> fn;
  CommOptions options;
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr first_error;  // guarded by mu, as are the fields below
  bool reported = false;           // first_error was taken by spawn_ranks
  int running = 0;
  std::vector<char> finished;
  std::vector<char> detached;
};

void run_rank(const std::shared_ptr<SpawnState>& state, int rank, int n, RankPinning pinning) {
  pin_to_cpu(rank, n, pinning);
  bind_rank_thread(state->ended);
  // Records the error before telling the world, so that the errors it causes at other ranks come
  // later; aborting before the communicator's destructor drains its async queue makes queued work
  // fail fast instead of waiting for peers.
  auto fail = [&](std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (!state->first_error && !state->reported) state->first_error = with_rank(error, rank);
    }
    state->cv.notify_all();
    state->world->abort(rank, fmt::format("rank {} threw: {}", rank, message_of(error)));
    state->ended->raise();
  };
  try {
    Communicator communicator(state->world->transport(rank), state->options);
    try {
      state->fn(communicator);
      state->world->abort(rank, fmt::format("rank {} exited (its function returned)", rank));
      state->ended->raise();
    } catch (...) {
      fail(std::current_exception());
    }
  } catch (...) {
    fail(std::current_exception());  // the Communicator constructor or destructor
  }
  bind_rank_thread(nullptr);
  {
    std::lock_guard<std::mutex> lock(state->mu);
    --state->running;
    state->finished[static_cast<std::size_t>(rank)] = 1;
    if (state->detached[static_cast<std::size_t>(rank)] != 0) {
      rank_threads_detail::add_detached(-1);
    }
  }
  state->cv.notify_all();
}

}  // namespace

void spawn_ranks(int n, const std::function<void(Communicator&)>& fn, CommOptions options,
                 RankPinning pinning, std::chrono::milliseconds grace) {
  auto state = std::make_shared<SpawnState>();
  state->world = InprocWorld::create(n);
  state->fn = fn;
  state->options = std::move(options);
  state->running = n;
  state->finished.assign(static_cast<std::size_t>(n), 0);
  state->detached.assign(static_cast<std::size_t>(n), 0);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([state, rank, n, pinning] { run_rank(state, rank, n, pinning); });
  }
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(state->mu);
    // Every rank's waits have deadlines, but a rank may sleep or compute for longer: after the
    // first error the others get `grace` to end (an abort makes their messages fail at once).
    state->cv.wait(lock, [&] { return state->running == 0 || state->first_error; });
    if (state->running > 0) {
      state->cv.wait_for(lock, grace, [&] { return state->running == 0; });
    }
    for (int rank = 0; rank < n; ++rank) {
      const auto r = static_cast<std::size_t>(rank);
      if (state->finished[r] == 0) {
        state->detached[r] = 1;
        rank_threads_detail::add_detached(1);
        log::warn(
            "rank {} did not end within {} ms of the first error; left running (the process "
            "must end)",
            rank, grace.count());
      }
    }
    // Taken out of the shared state: a detached thread that ends later must not release the
    // exception the caller is handling (its reference count is not visible to ThreadSanitizer).
    error = std::exchange(state->first_error, nullptr);
    state->reported = true;
  }
  for (int rank = 0; rank < n; ++rank) {
    std::thread& thread = threads[static_cast<std::size_t>(rank)];
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->detached[static_cast<std::size_t>(rank)] != 0) {
      thread.detach();
    }
  }
  for (auto& thread : threads) {
    if (thread.joinable()) thread.join();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dtrain::comm
