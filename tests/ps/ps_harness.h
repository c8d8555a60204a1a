// Runs W workers and S parameter servers as ranks of one in-process world: ranks 0..W-1 are the
// workers (each with a Client), ranks W..W+S-1 the servers (each serving until the workers stop).
#pragma once

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/ps/client.h"
#include "dtrain/ps/server.h"

namespace dtrain::ps::testing {

struct PsRun {
  std::vector<ServerStats> stats;          // per server, after serve()
  std::vector<std::vector<float>> shards;  // per server, its parameters at the end
};

// `colocated`: servers run on a second thread of worker ranks 0 .. S-1 instead of on ranks of
// their own (a rank is then both; its worker talks to its own rank's server).
inline PsRun run_ps(int workers, int servers, std::int64_t keys, const ServerOptions& options,
                    const std::function<void(Client&, int worker)>& worker_fn,
                    bool colocated = false) {
  const ShardLayout layout(keys, servers);
  std::vector<int> worker_ranks;
  std::vector<int> server_ranks;
  for (int w = 0; w < workers; ++w) worker_ranks.push_back(w);
  for (int s = 0; s < servers; ++s) server_ranks.push_back(colocated ? s : workers + s);
  PsRun run;
  run.stats.resize(static_cast<std::size_t>(servers));
  run.shards.resize(static_cast<std::size_t>(servers));
  comm::spawn_ranks(colocated ? workers : workers + servers, [&](comm::Communicator& comm) {
    const int rank = comm.rank();
    auto serve = [&](int index) {
      Server server(comm.transport(), index, layout, worker_ranks, options);
      server.serve();
      const auto s = static_cast<std::size_t>(index);
      run.stats[s] = server.stats();
      run.shards[s].assign(server.params().begin(), server.params().end());
    };
    if (!colocated && rank >= workers) {
      serve(rank - workers);
      return;
    }
    std::thread server_thread;
    if (colocated && rank < servers) server_thread = std::thread(serve, rank);
    // Workers wait longer than servers, so that a server's verdict naming a missing worker
    // reaches them before their own deadlines pass.
    Client client(comm.transport(), layout, server_ranks, workers,
                  2 * options.timeout + std::chrono::seconds(1), options.compression);
    worker_fn(client, rank);
    if (server_thread.joinable()) server_thread.join();
  });
  return run;
}

inline std::vector<float> joined(const PsRun& run) {
  std::vector<float> all;
  for (const auto& shard : run.shards) all.insert(all.end(), shard.begin(), shard.end());
  return all;
}

// Plain SGD over one tensor of `keys` floats.
inline ServerOptions sgd_options(Consistency consistency, std::int64_t keys) {
  ServerOptions options;
  options.consistency = consistency;
  options.optimizer.name = "sgd";
  options.segments = {{"w", 0, keys, true}};
  options.timeout = std::chrono::milliseconds(20000);
  options.worker_timeout = std::chrono::milliseconds(20000);
  return options;
}

}  // namespace dtrain::ps::testing
