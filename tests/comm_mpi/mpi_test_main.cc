// main() of the MPI suite, run as `mpirun -np P dtrain_comm_mpi_tests`: every process runs every
// test (tests are collective). Only rank 0 prints GoogleTest's report; other ranks print their
// failures with their rank. At the end the ranks agree on the outcome (max over ranks of "failed"),
// so a failure on any rank makes every process, and so mpirun, exit non-zero.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>

#include "dtrain/base/dtype.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/transport/mpi/world.h"

namespace {

// On ranks other than 0: one line per failed assertion, on stderr.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  try {
    rank = dtrain::comm::mpi_world_rank();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot start MPI: %s\n", e.what());
    return 2;
  }
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  std::int32_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  try {
    auto options = dtrain::comm::CommOptions();
    options.timeout = std::chrono::seconds(120);
    dtrain::comm::Communicator comm(dtrain::comm::mpi_world_transport(), options);
    comm.allreduce(&failed, 1, dtrain::DType::kI32, dtrain::comm::ReduceOp::kMax);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] the ranks could not agree on the outcome: %s\n", rank,
                 e.what());
    dtrain::comm::mpi_abort(3);
  }
  if (rank == 0 && failed != 0) std::fprintf(stderr, "some rank failed a test (see above)\n");
  dtrain::comm::mpi_finalize();
  return failed;
}
