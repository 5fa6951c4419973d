#include "transport/mpi_runtime.h"

#include <atomic>
#include <cstdlib>

#include "core/error.h"
#include "core/logging.h"

#ifdef SCALECOMM_WITH_MPI
#include "transport/mpi_detail.h"
#endif

namespace scalecomm {

namespace {
std::atomic<uint64_t> abandonedRequests{0};
}  // namespace

uint64_t mpiRequestsAbandoned() { return abandonedRequests.load(std::memory_order_acquire); }
void noteMpiRequestAbandoned() { abandonedRequests.fetch_add(1, std::memory_order_acq_rel); }

bool mpiLaunched() {
  // A torchrun worker inside an MPI allocation inherits one MPI process's
  // variables; it is not a rank of that MPI job.
  if (std::getenv("TORCHELASTIC_RUN_ID") != nullptr) return false;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && s[0] != '\0') return true;
  }
  return false;
}

#ifdef SCALECOMM_WITH_MPI

namespace {

std::mutex& callMutex() {
  static std::mutex mu;
  return mu;
}

// MPI's thread level, read on first use (only ever called while MPI is up).
int threadLevel() {
  static int level = [] {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      SC_LOG(Warn, "MPI provides thread level ", provided,
             " (below MPI_THREAD_MULTIPLE): scalecomm serialises its MPI calls; do not call MPI from other threads "
             "while scalecomm collectives run");
    }
    return provided;
  }();
  return level;
}

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool mpiCompiledIn() { return true; }

bool mpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

bool mpiEnsureInitialized() {
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  if (mpiActive()) return true;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || !mpiLaunched()) return false;
  int provided = MPI_THREAD_SINGLE;
  mpiCheck(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  std::atexit(finalizeAtExit);
  SC_LOG(Info, "MPI initialised by scalecomm (thread level ", provided, ")");
  return true;
}

int mpiWorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpiWorldSize() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

std::string mpiLibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  auto nl = s.find_first_of(",\n");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

MpiCallGuard::MpiCallGuard() : locked_(threadLevel() < MPI_THREAD_MULTIPLE) {
  if (locked_) callMutex().lock();
}

MpiCallGuard::~MpiCallGuard() {
  if (locked_) callMutex().unlock();
}

namespace {
// A new communicator as an MpiGroup's handle: errors returned, not fatal.
void* adoptComm(MPI_Comm comm) {
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return new MPI_Comm(comm);
}
}  // namespace

std::shared_ptr<MpiGroup> MpiGroup::create(const std::vector<int>& worldRanks, int selfRank, int tag) {
  if (!mpiActive()) {
    fail(ErrorKind::InvalidArgument,
         "scalecomm: MPI is not initialised; start the ranks with mpirun (or srun with "
         "MPI) to use the mpi transport or algorithm");
  }
  MpiCallGuard guard;
  MPI_Group world = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  mpiCheck(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  mpiCheck(MPI_Group_incl(world, static_cast<int>(worldRanks.size()), worldRanks.data(), &members), "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &comm);
  MPI_Group_free(&members);
  MPI_Group_free(&world);
  mpiCheck(rc, "MPI_Comm_create_group");
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  SC_CHECK(rank == selfRank, "MPI group rank ", rank, " differs from scalecomm rank ", selfRank);
  return std::shared_ptr<MpiGroup>(new MpiGroup(rank, static_cast<int>(worldRanks.size()), adoptComm(comm)));
}

std::shared_ptr<MpiGroup> MpiGroup::duplicate() const {
  MpiCallGuard guard;
  MPI_Comm comm = MPI_COMM_NULL;
  mpiCheck(MPI_Comm_dup(*static_cast<MPI_Comm*>(handle_), &comm), "MPI_Comm_dup");
  return std::shared_ptr<MpiGroup>(new MpiGroup(rank_, size_, adoptComm(comm)));
}

MpiGroup::~MpiGroup() {
  auto* comm = static_cast<MPI_Comm*>(handle_);
  // After MPI_Finalize (exit paths) the communicator is gone with MPI.
  if (mpiActive()) {
    MpiCallGuard guard;
    MPI_Comm_free(comm);
  }
  delete comm;
}

#else  // !SCALECOMM_WITH_MPI

bool mpiCompiledIn() { return false; }
bool mpiActive() { return false; }
bool mpiEnsureInitialized() { return false; }
int mpiWorldRank() { return 0; }
int mpiWorldSize() { return 1; }
std::string mpiLibraryVersion() { return ""; }
MpiCallGuard::MpiCallGuard() : locked_(false) {}
MpiCallGuard::~MpiCallGuard() = default;

std::shared_ptr<MpiGroup> MpiGroup::create(const std::vector<int>&, int, int) {
  fail(ErrorKind::InvalidArgument,
       "scalecomm was built without MPI: install an MPI (e.g. apt-get install libopenmpi-dev) and rebuild, "
       "without SCALECOMM_MPI=0");
}

std::shared_ptr<MpiGroup> MpiGroup::duplicate() const {
  fail(ErrorKind::InvalidArgument, "scalecomm was built without MPI");
}

MpiGroup::~MpiGroup() = default;

#endif

}  // namespace scalecomm
