// Checkpoint state that differs between ranks, for strategies whose replicas are their own (local
// SGD's momentum, decentralized SGD's parameters): each rank's tensors are stored under
// "rank<r>/<name>", so one file holds every rank's part and a resume can tell how many ranks wrote
// it. Cost of a gather: (P - 1) x the tensors' bytes received at the root (or at every rank).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/optim/optimizer.h"

namespace dtrain::train {

// "rank3/".
std::string rank_prefix(int rank);

// Every rank's `mine`, each tensor under its rank's prefix, in tensor then rank order: gathered at
// rank 0 alone (`root_only`; the other ranks return nothing) or at every rank (allgather).
// Collective over `comm`; every rank passes tensors of the same names and sizes.
std::vector<optim::StateTensor> gather_per_rank(comm::Communicator& comm,
                                                const std::vector<optim::StateTensor>& mine,
                                                bool root_only);

struct PerRankState {
  std::vector<optim::StateTensor> mine;  // this rank's tensors, the prefix removed
  std::size_t writers = 0;  // how many ranks' prefixes the checkpoint holds; 0: none (a
                            // checkpoint of synchronous training)
};

// Splits a checkpoint's state into this rank's part (moved out of `state`).
PerRankState split_per_rank(std::vector<optim::StateTensor>& state, int rank);

// CheckpointError when the checkpoint at `path` holds the per-rank state of `split.writers` ranks
// (none: a checkpoint of synchronous training, accepted) and this run has `world`: `holds` says
// what it holds ("the replicas"), `own` what is each rank's own, with its verb ("momentum is").
// Every rank reads the same file and so fails alike: no rank goes on to wait for the others.
void check_per_rank_writers(const PerRankState& split, int world, const std::string& path,
                            const std::string& holds, const std::string& own);

}  // namespace dtrain::train
