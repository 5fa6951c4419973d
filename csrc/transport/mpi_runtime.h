// scalecomm transport: the MPI runtime (Open MPI, MPICH) as seen by scalecomm.
//
// Contract:
// - Compiled into every build; without MPI at build time (or with
//   SCALECOMM_MPI=0 when building) mpiCompiledIn() is false and creating an
//   MpiGroup throws InvalidArgument saying how to get MPI support.
// - scalecomm initialises MPI only when the process was started by an MPI
//   launcher (mpirun/mpiexec/srun --mpi) and MPI is not initialised yet (e.g.
//   by mpi4py); it then asks for MPI_THREAD_MULTIPLE and finalises at exit.
//   It never finalises an MPI it did not initialise.
// - An MpiGroup is an MPI communicator over a scalecomm group's ranks (in the
//   group's rank order), made with MPI_Comm_create_group, which only the
//   group's members call. Every MPI call scalecomm makes holds MpiCallGuard:
//   a process-wide mutex when MPI gave less than MPI_THREAD_MULTIPLE, nothing
//   otherwise.
// - MPI cannot detect a dead peer; scalecomm's deadlines bound every wait
//   instead (a timed-out MPI request is abandoned and the group poisoned).
//   MPI may still complete an abandoned request later (inside any MPI call of
//   this process) and write into its buffers: whoever abandons one counts it
//   with noteMpiRequestAbandoned(), and the owner of the buffers keeps them
//   allocated when the count moved during its call (group/group.cc).
// Thread safety: all functions may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace scalecomm {

bool mpiCompiledIn();
// True when an MPI launcher started this process (its environment says so;
// not for torchrun workers, which may inherit an MPI process's variables).
bool mpiLaunched();
// True when MPI is initialised (by scalecomm or by someone else) and not finalised.
bool mpiActive();
// Initialises MPI if mpiLaunched() and nobody did yet; returns mpiActive().
bool mpiEnsureInitialized();
// This process's rank and size in MPI_COMM_WORLD (requires mpiActive()).
int mpiWorldRank();
int mpiWorldSize();
// "Open MPI v4.1.4, ..." or "" without MPI.
std::string mpiLibraryVersion();
// Requests abandoned so far in this process (see above). Any thread.
uint64_t mpiRequestsAbandoned();
void noteMpiRequestAbandoned();

class MpiCallGuard {
 public:
  MpiCallGuard();
  ~MpiCallGuard();
  MpiCallGuard(const MpiCallGuard&) = delete;
  MpiCallGuard& operator=(const MpiCallGuard&) = delete;

 private:
  bool locked_;
};

class MpiGroup {
 public:
  // worldRanks[i] is group rank i's MPI_COMM_WORLD rank; `tag` must be the
  // same on every member and differ between groups created concurrently.
  static std::shared_ptr<MpiGroup> create(const std::vector<int>& worldRanks, int selfRank, int tag);
  ~MpiGroup();
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  // A new communicator over the same ranks (MPI_Comm_dup: collective, every
  // member calls it), whose messages match nothing of this one's.
  std::shared_ptr<MpiGroup> duplicate() const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The MPI_Comm, as an opaque handle (cast back in MPI-aware sources only).
  void* handle() const { return handle_; }

 private:
  MpiGroup(int rank, int size, void* handle) : rank_(rank), size_(size), handle_(handle) {}
  int rank_;
  int size_;
  void* handle_;
};

}  // namespace scalecomm
