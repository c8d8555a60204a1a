#include "dtrain/comm/spawn_ranks.h"

#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

void spawn_ranks(int n, const std::function<void(Communicator&)>& fn, CommOptions options) {
  const std::shared_ptr<InprocWorld> world = InprocWorld::create(n);
  std::mutex mu;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
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
