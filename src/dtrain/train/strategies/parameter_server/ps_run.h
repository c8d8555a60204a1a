// Parameter-server training (parallel.strategy = "parameter_server", docs/PS.md): which rank does
// what, and the "parallel" section of its summary.json.
//
// Roles on one communicator of R ranks: ranks 0 .. W-1 are workers (W = R -
// parameter_server.servers), ranks W .. R-1 are servers, server s holding key range s of
// ps::ShardLayout(parameters, S). With ranks as threads (no mpirun) the launcher starts
// parallel.workers + parameter_server.servers of them; under mpirun the job's ranks (processes x
// parallel.workers threads) are split this way. With parameter_server.colocate_servers every rank
// is a worker (W = R) and workers 0 .. S-1 also run server s = rank on a second thread (a rank is
// both; its worker reaches that server through the transport like any other). Worker traffic to
// servers runs on a communicator of its own; the workers also share one without the servers, for
// the start-up checks and (bsp) evaluation.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/ps/compression.h"
#include "dtrain/ps/server_stats.h"
#include "dtrain/train/config.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/run_data.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

// parameter_server.compression, pull_compression and error_feedback as the workers and servers
// use them (the run's seed for the codecs' randomness).
ps::Compression ps_compression(const Config& config);

// Ranks as threads without MPI: workers + servers.
int ps_thread_ranks(const Config& config);

// This rank's part: serve until the workers stop, or train as a worker. Returns worker 0's
// summary; nothing on the others.
// `after_run`, when set, sees each worker's Trainer once it has run (tests read the parameters).
std::optional<RunSummary> run_ps_rank(comm::Communicator& comm, const Config& config,
                                      const TrainerOptions& options,
                                      const std::shared_ptr<const RunData>& data,
                                      const std::function<void(Trainer&)>& after_run = {});

// summary.json's "parallel" for a parameter-server run: settings, each server's statistics with
// its staleness histograms, and the dropped (late) gradients of backup-worker runs.
nlohmann::json ps_summary(const Config& config, int workers,
                          const std::vector<ps::ServerStats>& servers,
                          std::int64_t worker0_dropped);

}  // namespace dtrain::train
