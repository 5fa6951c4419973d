// scalecomm group: the settings of one process group.
//
// Contract: GroupConfig holds every per-group setting with its built-in
// default; configFromEnvironment() overlays the SCALECOMM_* variables
// (core/params.h), and callers (Options in Python) overlay their own fields
// after it. checkConfig() raises Error(InvalidArgument) naming the setting,
// its variable and the valid range. Value type.
#pragma once

#include <cstdint>
#include <string>

namespace scalecomm {

struct GroupConfig {
  std::string algorithm = "auto";  // selection spec, see algo/selection.h
  int64_t psServers = 1;
  std::string tuningFile;
  std::string transport = "auto";  // auto | shm | tcp | mpi
  bool useMpi = true;              // SCALECOMM_MPI != 0: an MPI communicator when all ranks run under MPI
  int64_t segmentBytes = 0;        // 0: automatic (256 KiB on one host, 1 MiB across hosts)
  int64_t sendAheadBytes = -1;     // pacing (algo/plan.h); -1: automatic, 0: off
  int64_t shmRingBytes = 4 << 20;
  int64_t mpiChunkBytes = 1 << 20;
  int64_t spinMicros = 50;
  int64_t timeoutMs = 1800000;
  std::string cudaTransport = "auto";  // auto (NCCL for allreduce when built with it) | host
  std::string compression;             // group default for allreduce of floating tensors ("" none)
  std::string groupName;
};

// Defaults overridden by SCALECOMM_* environment variables.
GroupConfig configFromEnvironment();

// Throws Error(InvalidArgument) for a setting out of range for a group of `size` ranks.
void checkConfig(const GroupConfig& c, int size);

}  // namespace scalecomm
