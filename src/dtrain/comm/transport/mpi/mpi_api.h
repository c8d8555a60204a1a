// The MPI C API as the mpi transport includes it (private to transport/mpi/): Open MPI's C++
// bindings are skipped (deprecated, and they would need libmpi_cxx), and an MPI error code becomes
// a CommError whose message says which call failed, where, and MPI's own text.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <string>
#include <string_view>

namespace dtrain::comm::mpi {

// MPI's description of `code` ("MPI_ERR_TRUNCATE: message truncated", ...).
std::string error_string(int code);

// Throws CommError("<where>: <call> failed: <MPI's text>") unless code == MPI_SUCCESS.
void check(int code, std::string_view call, std::string_view where);

}  // namespace dtrain::comm::mpi
