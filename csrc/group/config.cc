#include "group/config.h"

#include "core/error.h"
#include "core/params.h"

namespace scalecomm {

GroupConfig configFromEnvironment() {
  GroupConfig c;
  c.algorithm = paramString("SCALECOMM_ALGO");
  c.psServers = paramInt("SCALECOMM_PS_SERVERS");
  c.tuningFile = paramString("SCALECOMM_TUNING_FILE");
  c.transport = paramString("SCALECOMM_TRANSPORT");
  c.useMpi = paramString("SCALECOMM_MPI") != "0";
  c.segmentBytes = paramInt("SCALECOMM_SEGMENT_BYTES");
  c.sendAheadBytes = paramInt("SCALECOMM_SEND_AHEAD_BYTES");
  c.shmRingBytes = paramInt("SCALECOMM_SHM_RING_BYTES");
  c.mpiChunkBytes = paramInt("SCALECOMM_MPI_CHUNK_BYTES");
  c.spinMicros = paramInt("SCALECOMM_SPIN_US");
  c.cudaTransport = paramString("SCALECOMM_CUDA_TRANSPORT");
  c.compression = paramString("SCALECOMM_COMPRESSION");
  int64_t t = paramInt("SCALECOMM_TIMEOUT_MS");
  if (t > 0) c.timeoutMs = t;
  return c;
}

void checkConfig(const GroupConfig& c, int size) {
  auto check = [](bool ok, auto&&... msg) {
    if (!ok) fail(ErrorKind::InvalidArgument, "scalecomm: ", msg...);
  };
  check(c.psServers >= 1 && c.psServers <= size, "ps_servers (SCALECOMM_PS_SERVERS) must lie in [1, ", size,
        "] for this group of ", size, " ranks, got ", c.psServers);
  check(c.transport == "auto" || c.transport == "shm" || c.transport == "tcp" || c.transport == "mpi",
        "unknown transport '", c.transport, "'; choose auto, shm, tcp or mpi");
  check(c.cudaTransport == "auto" || c.cudaTransport == "host", "unknown SCALECOMM_CUDA_TRANSPORT '", c.cudaTransport,
        "'; choose auto or host");
  check(c.segmentBytes >= 0, "segment_bytes must be positive (or 0: automatic), got ", c.segmentBytes);
  check(c.sendAheadBytes >= -1,
        "send_ahead_bytes (SCALECOMM_SEND_AHEAD_BYTES) must be -1 (automatic), 0 (unpaced) or a byte count, got ",
        c.sendAheadBytes);
  check(c.shmRingBytes >= 4096 && c.shmRingBytes % 64 == 0,
        "shm ring bytes must be a multiple of 64 and at least 4096, got ", c.shmRingBytes);
  check(c.mpiChunkBytes >= 64 && c.mpiChunkBytes <= (1 << 30), "SCALECOMM_MPI_CHUNK_BYTES must lie in [64, 2^30], got ",
        c.mpiChunkBytes);
  check(c.timeoutMs > 0, "timeout must be positive, got ", c.timeoutMs, " ms");
}

}  // namespace scalecomm
