// What data-parallel ranks must agree on before the first step, checked and made so.
#pragma once

#include <string>

#include "dtrain/comm/communicator.h"
#include "dtrain/nn/param_store.h"

namespace dtrain::parallel {

// Collective. Every rank passes its own `text` (a resolved config, a model layout); when any rank's
// text differs from rank 0's, every rank throws ConfigError: the differing ranks name the first
// line that differs, theirs and rank 0's, and the others name the differing ranks. `what` names the
// text in messages ("the configuration"). Cost: one broadcast of rank 0's text and one allgather
// of one byte per rank.
void check_same_on_all_ranks(comm::Communicator& comm, const std::string& text,
                             const std::string& what);

// Collective. Rank 0's parameters and buffers (running statistics) overwrite every other rank's,
// so all replicas start identical whatever each rank's initialisation did.
void broadcast_parameters(comm::Communicator& comm, nn::ParamStore& store);

// The model's parameter table, one "name shape offset" line per tensor: what
// check_same_on_all_ranks compares so that flat buffers mean the same on every rank.
std::string parameter_layout(const nn::ParamStore& store);

}  // namespace dtrain::parallel
