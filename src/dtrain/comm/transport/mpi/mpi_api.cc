#include "dtrain/comm/transport/mpi/mpi_api.h"

#include <fmt/format.h>

#include "dtrain/comm/comm_error.h"

namespace dtrain::comm::mpi {

std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return fmt::format("MPI error code {}", code);
  }
  return std::string(text, static_cast<std::size_t>(length));
}

void check(int code, std::string_view call, std::string_view where) {
  if (code == MPI_SUCCESS) return;
  throw CommError(fmt::format("{}: {} failed: {}", where, call, error_string(code)));
}

}  // namespace dtrain::comm::mpi
