#include "dtrain/comm/spawn_ranks.h"

#include <pthread.h>
#include <sched.h>

#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/base/env.h"
#include "dtrain/comm/comm_error.h"
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

}  // namespace

void spawn_ranks(int n, const std::function<void(Communicator&)>& fn, CommOptions options,
                 RankPinning pinning) {
  const std::shared_ptr<InprocWorld> world = InprocWorld::create(n);
  std::mutex mu;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      pin_to_cpu(rank, n, pinning);
      // Records the error before telling the world, so that the errors it causes at other
      // ranks come later; aborting before the communicator's destructor drains its async queue
      // makes queued work fail fast instead of waiting for peers.
      auto fail = [&](std::exception_ptr error) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first_error) first_error = with_rank(error, rank);
        }
        world->abort(rank, fmt::format("rank {} threw: {}", rank, message_of(error)));
      };
      try {
        Communicator communicator(world->transport(rank), options);
        try {
          fn(communicator);
        } catch (...) {
          fail(std::current_exception());
          return;
        }
      } catch (...) {
        fail(std::current_exception());  // the Communicator constructor itself
        return;
      }
      world->abort(rank, fmt::format("rank {} exited (its function returned)", rank));
    });
  }
  for (auto& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace dtrain::comm
