// Helpers of the MPI suite (tests/comm_mpi/): every process of `mpirun -np P` runs every test, so
// each test is collective. Each test takes a fresh transport (its own duplicated communicators),
// so messages a failing test leaves behind never reach the next one.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dtrain/comm/communicator.h"
#include "dtrain/comm/transport/mpi/world.h"

namespace dtrain::comm::testing {

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A healthy collective never takes this long even with 4 ranks on 2 busy cores; a test that goes
// wrong on one rank makes the others fail after it instead of hanging.
inline CommOptions mpi_test_options() {
  CommOptions options;
  options.timeout = std::chrono::seconds(60);
  // Larger than MpiTransport::kInlineBytes, so large counts take the split-payload path and small
  // ones the inline path, and pipelined algorithms run many segments.
  options.segment_bytes = 24000;
  return options;
}

// A communicator over a fresh transport of the whole job (collective).
inline std::unique_ptr<Communicator> make_communicator(CommOptions options = mpi_test_options()) {
  return std::make_unique<Communicator>(mpi_world_transport(), std::move(options));
}

}  // namespace dtrain::comm::testing
