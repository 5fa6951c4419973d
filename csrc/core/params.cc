#include "core/params.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace scalecomm {

const std::vector<ParamSpec>& allParams() {
  static const std::vector<ParamSpec> table = {
      {"SCALECOMM_DEBUG", "WARN", "Log level: ERROR, WARN, INFO (effective settings and each choice made), DEBUG."},
      {"SCALECOMM_ALGO", "auto",
       "Algorithm per collective, e.g. 'rhd' (allreduce) or 'allreduce:rhd,broadcast:tree'. allreduce: auto, ring, "
       "rhd, tree, direct, pairwise (2 ranks, up to 4032 bytes), ps, hier, mpi; broadcast and reduce: auto, chain, "
       "tree, mpi; allgather and reduce_scatter: "
       "ring, mpi; barrier: dissemination, mpi. 'mpi' alone: MPI's own collectives for all. nccl (allreduce, CUDA "
       "tensors): NCCL's own allreduce. auto picks per call."},
      {"SCALECOMM_PS_SERVERS", "1",
       "Parameter-server allreduce (ps): number of server ranks (ranks 0..S-1); 1 is a central server."},
      {"SCALECOMM_TUNING_FILE", "",
       "File written by 'python -m pyscalecomm.tune': measured winners per size (and alpha, beta) for auto."},
      {"SCALECOMM_TRANSPORT", "auto",
       "Transport per peer: auto (shm on the same host; between hosts mpi when all ranks run under one mpirun, else "
       "tcp), shm, tcp, mpi."},
      {"SCALECOMM_CUDA_TRANSPORT", "auto",
       "CUDA tensors: auto (allreduce over NCCL send/recv with scalecomm's schedules when the build has NCCL, every "
       "other collective staged through pinned host memory over the CPU transports), host (stage everything)."},
      {"SCALECOMM_COMPRESSION", "",
       "Group default codec for allreduce (SUM/AVG) of floating tensors: fp16, bf16, topk:<ratio>, "
       "topk_sampled:<ratio>, randomk:<ratio>, qsgd:<levels>, sign, powersgd:<rank>; empty or none: off. Error "
       "feedback is on for the biased ones (topk, randomk, sign, powersgd)."},
      {"SCALECOMM_MPI", "auto",
       "0 turns MPI off: at build time builds without it, at run time never uses it (no MPI communicator, transport "
       "or mpi algorithm). auto: used when the ranks were started by an MPI launcher."},
      {"SCALECOMM_SEGMENT_BYTES", "0",
       "Pipelining unit: each chunk moves in segments of at most this many bytes. 0: 256 KiB when every rank is on "
       "one host, 1 MiB when the group spans hosts."},
      {"SCALECOMM_SEND_AHEAD_BYTES", "-1",
       "Pacing: within one step of an exchange with one peer (ring, rhd) a rank's sends run at most this many bytes "
       "(rounded up to whole segments) ahead of what it has received in that step, so ranks that enter a collective "
       "apart fall back into step. -1: 1 MiB when the group spans hosts, off on one host; 0: off."},
      {"SCALECOMM_SHM_RING_BYTES", "4194304",
       "Bytes of each shared-memory ring (one per ordered pair of same-host ranks)."},
      {"SCALECOMM_TIMEOUT_MS", "0",
       "Overrides the group timeout in milliseconds (0: use init_process_group's timeout)."},
      {"SCALECOMM_SOCKET_IFNAME", "",
       "Network interface whose IPv4 address TCP peers connect to (default: the route to MASTER_ADDR)."},
      {"SCALECOMM_HOSTNAME", "",
       "Host identity used to decide which peers share memory (default: hostname and namespaces)."},
      {"SCALECOMM_TIMELINE", "",
       "Write a Chrome/Perfetto trace per rank to this path ('{rank}' is replaced, else '.rank<r>' is inserted "
       "before the extension): one span per collective and, inside, per step: send, recv, recv+reduce, wait."},
      {"SCALECOMM_MPI_CHUNK_BYTES", "1048576",
       "mpi transport: largest MPI message; each link keeps 4 such buffers in flight per direction (at least 64)."},
      {"SCALECOMM_LAUNCHER_ENV", "1",
       "Python: 1 lets 'import pyscalecomm' fill RANK, WORLD_SIZE, MASTER_ADDR, ... from mpirun or srun (not "
       "torchrun); 0 leaves the environment alone."},
      {"SCALECOMM_NVTX", "0",
       "1: an NVTX range per collective ('scalecomm:allreduce:ring seq 12 4194304 B') for Nsight Systems (CUDA "
       "builds)."},
      {"SCALECOMM_SPIN_US", "50", "Microseconds a waiting thread spins before it yields or sleeps."},
      {"SCALECOMM_CUDA", "auto", "Build time: 0 builds without CUDA sources even when CUDA is present."},
  };
  return table;
}

static const ParamSpec& lookup(const char* name) {
  for (const auto& p : allParams()) {
    if (std::strcmp(p.name, name) == 0) return p;
  }
  fail(ErrorKind::Internal, "scalecomm internal error: parameter ", name, " is not declared in params.cc");
}

bool paramIsSet(const char* name) {
  lookup(name);
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0';
}

std::string paramString(const char* name) {
  const ParamSpec& spec = lookup(name);
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? std::string(v) : std::string(spec.defaultValue);
}

int64_t paramInt(const char* name) {
  std::string v = paramString(name);
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0') {
    fail(ErrorKind::InvalidArgument, "scalecomm: environment variable ", name, "='", v,
         "' is not an integer; unset it or give a whole number.");
  }
  return x;
}

}  // namespace scalecomm
