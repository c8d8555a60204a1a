#include "dtrain/comm/spawn_process_ranks.h"

#include <fmt/format.h>

#include <mutex>
#include <thread>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/rank_threads.h"
#include "dtrain/comm/transport/hybrid/transport.h"
#include "dtrain/comm/transport/inproc/world.h"
#include "dtrain/comm/transport/mpi/world.h"

namespace dtrain::comm {

void spawn_process_ranks(int threads_per_process, const std::function<void(Communicator&)>& fn,
                         CommOptions options) {
  if (threads_per_process < 1) {
    throw ConfigError(fmt::format("threads per process must be >= 1, got {}", threads_per_process));
  }
  if (threads_per_process == 1) {
    Communicator communicator(mpi_world_transport(), options);
    fn(communicator);
    return;
  }
  const auto w = static_cast<std::size_t>(threads_per_process);
  // W x W process-level transports, created in the same order on every process (collective).
  std::vector<std::vector<std::shared_ptr<Transport>>> links(w);
  for (auto& row : links) {
    for (std::size_t d = 0; d < w; ++d) row.push_back(mpi_world_transport());
  }
  const std::shared_ptr<InprocWorld> world = InprocWorld::create(threads_per_process);
  // Ends the injected sleeps of this process's rank threads (sleep_unless_aborted) when one
  // of them fails or returns.
  const auto ended = std::make_shared<WorldEndSignal>();
  std::mutex mu;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_per_process; ++t) {
    threads.emplace_back([&, t] {
      bind_rank_thread(ended);
      struct Raise {
        WorldEndSignal& signal;
        ~Raise() { signal.raise(); }
      } raise_at_end{*ended};
      try {
        Communicator communicator(std::make_shared<HybridTransport>(world->transport(t), links),
                                  options);
        fn(communicator);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first_error) first_error = std::current_exception();
        }
        world->abort(t, fmt::format("thread {} of this process threw: {}", t, e.what()));
        return;
      }
      world->abort(t, fmt::format("thread {} of this process exited", t));
    });
  }
  for (auto& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace dtrain::comm
