// scalecomm transport: MPI types for MPI-aware sources (mpi_link.cc,
// comm/mpi_collectives.cc). Include only under SCALECOMM_WITH_MPI.
//
// Contract: mpiComm() unwraps an MpiGroup's communicator; mpiCheck() turns an
// MPI error code into Error(Io) naming the call and the MPI error string.
#pragma once

// The C API only: without these, Open MPI and MPICH pull in their deprecated
// C++ bindings, whose symbols live in a library we do not link.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "core/error.h"
#include "transport/mpi_runtime.h"

namespace scalecomm {

inline MPI_Comm mpiComm(const MpiGroup& g) { return *static_cast<MPI_Comm*>(g.handle()); }

inline void mpiCheck(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(ErrorKind::Io, "MPI call ", call, " failed: ", std::string(text, static_cast<size_t>(len)));
}

}  // namespace scalecomm
