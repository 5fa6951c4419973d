// scalecomm core: every setting, declared once.
//
// Contract: each SCALECOMM_* variable is one line of the two lists below.
// From that line alone come: the GroupConfig field (group/config.h) with its
// default, loading it from the environment, its validation, the Python
// `Options` field and the pybind `BackendConfig` attribute, the entry of
// `pyscalecomm.params()` and the row of docs/configuration.md (checked by
// tests/test_docs.py). Reading an undeclared name is an internal error, so a
// typo cannot silently read nothing. Values are read from the environment at
// each call (group creation only). Thread safe (read-only tables).
//
// A group setting: X(kind, field, option, env, default, lo, hi, choices, doc)
//   kind    Int (int64_t, lo <= v <= hi; hi kWorld: the group size) or
//           Text (std::string; choices "a|b|c" restrict it, "" any text)
//   field   GroupConfig member; option: its Python name (Options, BackendConfig)
// A process setting (read where it is used, no field):
//   P(env, default, choices, doc)
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace scalecomm {

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
constexpr int64_t kWorld = std::numeric_limits<int64_t>::max() - 1;  // hi bound: the group's size

// clang-format off
#define SCALECOMM_GROUP_PARAMS(X)                                                                                     \
  X(Text, algorithm, "algorithm", "SCALECOMM_ALGO", "auto", 0, 0, "",                                                \
    "Algorithm per collective, e.g. 'rhd' (allreduce) or 'allreduce:rhd,broadcast:tree'; 'mpi' alone: MPI's own "   \
    "collectives for all. The names each collective takes are the algorithm table's (docs/algorithms.md, "          \
    "pyscalecomm.accepted_algorithms(collective)); an unknown one fails at group creation, listing them. auto "     \
    "picks per call (allreduce) or per size (broadcast, reduce); barrier's auto is shared on one host, else "       \
    "dissemination.")                                                                                              \
  X(Int, deterministic, "deterministic", "SCALECOMM_DETERMINISTIC", 0, 0, 1, "",                                  \
    "1: every reduction (allreduce, reduce, reduce_scatter, and the sums inside compressed allreduces) gives each "  \
    "element as the left fold of the ranks' values in rank order, so the same inputs give the same bits whatever "   \
    "the segment and bucket sizes, transport and host layout: auto runs ordered (shared on one host's windows), "   \
    "CUDA tensors' reductions are staged through host memory, codecs run in scalecomm's loops, and naming an "        \
    "algorithm that does not fold in rank order (or codec_kernels=torch) fails at group creation.")                 \
  X(Int, psServers, "ps_servers", "SCALECOMM_PS_SERVERS", 1, 1, kWorld, "",                                           \
    "Parameter-server allreduce (ps): number of server ranks (ranks 0..S-1); 1 is a central server.")                \
  X(Text, autotune, "autotune", "SCALECOMM_AUTOTUNE", "online", 0, 0, "online|model",                                \
    "How allreduce's auto chooses: online (the first calls of each size bucket try the algorithms the cost model "  \
    "ranks close, interleaved, and the fastest by median over ranks wins where it beats the model's choice beyond "  \
    "the noise; re-measured on drift), model (the cost model, or the tuning file's winner at the nearest size).")    \
  X(Int, autoBlockBytes, "auto_block_bytes", "SCALECOMM_AUTO_BLOCK_BYTES", 1048576, 0, int64_t{1} << 40, "",        \
    "auto measured online: each trial runs its algorithm for a block of consecutive calls that make up this many "  \
    "bytes (at most 16 calls; at least 2 for messages up to 4x this size, 1 above) and is timed on the block's "    \
    "second half, so an algorithm is measured as it runs back to back, not just after another one's call. 0: one " \
    "call per trial.")                                                                                             \
  X(Int, autoExplorePercent, "auto_explore_percent", "SCALECOMM_AUTO_EXPLORE_PERCENT", 2, 1, 100, "",                \
    "auto measured online: an exploration adds at most this percent to its size bucket's time. Before each round "  \
    "of trials the bucket runs the leader (the fastest so far, at first the model's choice) alone for as many "      \
    "calls as that takes, so a short run explores as far as its budget goes and a long one finishes. 100: no "      \
    "pauses (the rounds run back to back). A running group changes it with its backend's "                        \
    "set_auto_explore_percent(), as the benchmark does to settle auto before timing it.")                          \
  X(Text, tuningFile, "tuning_file", "SCALECOMM_TUNING_FILE", "", 0, 0, "",                                           \
    "Tuning cache: auto's measured winners per size, loaded at group creation (by rank 0, shared with all) and "    \
    "written by rank 0 as it measures. Empty: a file per machine, layout and version in the user's own cache "      \
    "directory ($XDG_CACHE_HOME, else ~/.cache)/scalecomm (none without a home directory); a named file must be a "  \
    "regular file of at most 1 MiB; none: no file. python -m pyscalecomm.tune writes or shows one.")                \
  X(Text, transport, "transport", "SCALECOMM_TRANSPORT", "auto", 0, 0, "auto|shm|tcp|mpi",                            \
    "Transport per peer: auto (shm on the same host; between hosts mpi when all ranks run under one mpirun, else "   \
    "tcp), shm, tcp, mpi.")                                                                                          \
  X(Text, mpi, "mpi", "SCALECOMM_MPI", "auto", 0, 0, "auto|0|1",                                                      \
    "0 turns MPI off: at build time builds without it, at run time never uses it (no MPI communicator, transport "   \
    "or mpi algorithm). auto or 1: used when the ranks were started by an MPI launcher.")                            \
  X(Text, cudaTransport, "cuda_transport", "SCALECOMM_CUDA_TRANSPORT", "auto", 0, 0, "auto|host",                     \
    "CUDA tensors: auto (every collective runs on the GPU over NCCL when the build has NCCL: NCCL's own collective " \
    "where it has one for the dtype and op and no scalecomm schedule is named, the schedule over NCCL send/recv "     \
    "otherwise; staged through pinned host memory without NCCL), host (stage everything through host memory).")     \
  X(Int, stageChunkBytes, "stage_chunk_bytes", "SCALECOMM_STAGE_CHUNK_BYTES", 4194304, 4096, int64_t{1} << 40, "",   \
    "CUDA tensors staged through host memory: allreduce, broadcast and reduce of tensors larger than this move in "  \
    "chunks of this many bytes through two pinned host buffers, so that the copies of one chunk overlap the "         \
    "collective on the next; other collectives stage whole tensors.")                                                \
  X(Text, compression, "compression", "SCALECOMM_COMPRESSION", "", 0, 0, "",                                          \
    "Group default codec for allreduce (SUM/AVG) of floating tensors: fp16, bf16, topk:<ratio>, "                   \
    "topk_sampled:<ratio>, randomk:<ratio>, qsgd:<levels>, sign, powersgd:<rank>; auto (per tensor, the fastest " \
    "of none, bf16 and top-k 10/3/1 % by measured cost; PowerSGD rank 4 too where the weights' shapes are known: " \
    "a 2-D tensor, a DDP bucket through the hook); empty or none: off. Error feedback is on for the biased "  \
    "ones (topk, randomk, sign, powersgd) and for auto.")                                           \
  X(Text, codecKernels, "codec_kernels", "SCALECOMM_CODEC_KERNELS", "auto", 0, 0, "auto|torch|host",                  \
    "Where a compressed allreduce encodes and decodes: auto (CUDA tensors on their GPU as torch operations, over "   \
    "NCCL, when cuda_transport allows it; CPU tensors in scalecomm's own loops), torch (torch operations on the "   \
    "tensor's device, CPU tensors too), host (scalecomm's loops on the CPU; CUDA tensors staged through host "     \
    "memory). Same codecs and wire formats either way.")                                                             \
  X(Int, compressionAutoBound, "compression_auto_bound", "SCALECOMM_COMPRESSION_AUTO_BOUND", 20, 0, 100, "",        \
    "compression=auto leaves out a codec whose error-feedback residual holds back more than this percentage of "   \
    "the key's recent gradient (its inputs of about the last 64 calls, summed with a decay), along that "          \
    "gradient: the share of the update it delays; 0: no bound.")                                                   \
  X(Int, compressionMinBytes, "compression_min_bytes", "SCALECOMM_COMPRESSION_MIN_BYTES", 65536, 0, kNoLimit, "",     \
    "The group default codec compresses only allreduces of at least this many bytes; smaller ones (a loss, a "     \
    "metric, a small bucket) go exact, where compressing saves little time and costs their accuracy.")             \
  X(Int, segmentBytes, "segment_bytes", "SCALECOMM_SEGMENT_BYTES", 0, 0, kNoLimit, "",                                \
    "Pipelining unit: each chunk moves in segments of at most this many bytes. 0: 1 MiB when the group spans "      \
    "hosts over tcp, else 256 KiB (one host; collectives on the zero-copy mpi channel); 16 MiB on device memory "  \
    "(the NCCL channel).")                            \
  X(Int, sendAheadBytes, "send_ahead_bytes", "SCALECOMM_SEND_AHEAD_BYTES", -1, -1, kNoLimit, "",                      \
    "Pacing: within one step of an exchange with one peer (ring, rhd) a rank's sends run at most this many bytes "   \
    "(rounded up to whole segments) ahead of what it has received in that step, so ranks that enter a collective "   \
    "apart fall back into step. -1: 1 MiB when the group spans hosts, off on one host; 0: off.")                     \
  X(Int, shmRingBytes, "shm_ring_bytes", "SCALECOMM_SHM_RING_BYTES", 1048576, 4096, int64_t{1} << 40, "",            \
    "Bytes of each shared-memory ring (one per ordered pair of same-host ranks); a multiple of 64. The default "    \
    "keeps a host's rings in its caches; larger rings are slower, not faster, and much smaller ones stall the "   \
    "sender.")                                                                                                        \
  X(Int, shmWindowBytes, "shm_window_bytes", "SCALECOMM_SHM_WINDOW_BYTES", 524288, 0, int64_t{1} << 30, "",         \
    "Bytes of each rank's shared window (a log of 4x this size, mapped by every rank of the group when all share "  \
    "one host): the largest message a shared allreduce carries in one flag round; larger ones go in chunks of this " \
    "size, one flag round each; a multiple of 64. 0: no windows.")                                                   \
  X(Int, mpiChunkBytes, "mpi_chunk_bytes", "SCALECOMM_MPI_CHUNK_BYTES", 1048576, 64, int64_t{1} << 30, "",            \
    "mpi transport: largest MPI message; each link keeps 4 such buffers in flight per direction.")                   \
  X(Int, mpiZeroCopy, "mpi_zero_copy", "SCALECOMM_MPI_ZERO_COPY", 1, 0, 1, "",                                     \
    "mpi transport, when every pair of ranks uses it: 1 moves collectives' messages straight from and into the "   \
    "tensors (a receive-reduce through a scratch buffer), one MPI request each; 0 copies them through the mpi "     \
    "links' staging buffers. Point-to-point calls always use the links.")                                           \
  X(Int, socketsPerPeer, "sockets_per_peer", "SCALECOMM_SOCKETS_PER_PEER", 1, 1, 64, "",                            \
    "tcp transport: sockets per pair of ranks (a pair uses the smaller of its two ranks' values). The link's bytes " \
    "are striped over them in 128 KiB pieces, read back in order. 1 fills 1-10 Gbit/s links; more pay where one "   \
    "socket's CPU cost is the bound (links of 25 Gbit/s and up) and cost on capped links (each piece waits for "   \
    "the slowest socket).")                                                                                          \
  X(Int, spinMicros, "spin_us", "SCALECOMM_SPIN_US", -1, -1, 10000000, "",                                           \
    "Microseconds a waiting thread spins before it yields or sleeps. -1: 50 on the group's worker (its waits "       \
    "overlap the caller's compute, which a yield lets run) and, for a blocking call waiting on its caller's "        \
    "own thread (which has nothing else to run: a yield would wait a time slice for the core on busy cores), "       \
    "200 or 50, whichever that thread's calls measure faster (200 beside busy processes, 50 beside another "         \
    "job whose ranks also spin); 0 for both when this machine (one kernel: its emulated hosts and containers "       \
    "count together) runs more of the group's ranks than it has cores (a spinning rank would hold the core "         \
    "its peer needs). A value set here holds for both.")                                                             \
  X(Int, traceBuffer, "trace_buffer", "SCALECOMM_TRACE_BUFFER", 256, 0, 1048576, "",                                 \
    "Flight recorder: the last this many calls of each group (state, sizes, algorithm, timings), dumped on a "       \
    "timeout or error (see SCALECOMM_TRACE_DIR); 0: off, and no desync report.")                                       \
  X(Int, shutdownGraceMs, "shutdown_grace_ms", "SCALECOMM_SHUTDOWN_GRACE_MS", 2000, 0, kNoLimit, "",                \
    "destroy_process_group() and interpreter exit wait this long for calls in flight (a peer may be about to "      \
    "join them), then abort them instead of waiting for their timeout; and, at most this long, for the peers' "    \
    "links to take the notice that this rank left in order.")                                                    \
  X(Int, timeoutMs, "timeout_ms", "SCALECOMM_TIMEOUT_MS", 1800000, 1, kNoLimit, "",                                   \
    "Group timeout in milliseconds: every collective and the rendezvous fail after it. Unset: "                     \
    "init_process_group's timeout (whose own default is 30 minutes).")

#define SCALECOMM_PROCESS_PARAMS(P)                                                                                   \
  P("SCALECOMM_DEBUG", "WARN", "ERROR|WARN|INFO|DEBUG",                                                               \
    "Log level: ERROR, WARN, INFO (effective settings and each choice made), DEBUG.")                                \
  P("SCALECOMM_SECRET", "", "",                                                                                       \
    "Shared secret mixed into the key every TCP connection must prove (set the same value on every rank). The "     \
    "key's other half comes through the rendezvous store; set this when others can reach your store.")              \
  P("SCALECOMM_SUMMARY", "0", "0|1",                                                                                  \
    "1: each group logs its operations per size bucket (calls, bytes, seconds, average, busbw) when it is "         \
    "destroyed or the process exits; pyscalecomm.stats(group) returns the same at any time.")                        \
  P("SCALECOMM_TRACE_DIR", "", "",                                                                                    \
    "Directory for flight-recorder dumps (scalecomm-trace-<group>-rank<r>.json, one per rank and group) written "   \
    "on a timeout or error; merge them with 'python -m pyscalecomm.trace DIR'. Empty: a summary in the log.")       \
  P("SCALECOMM_SOCKET_IFNAME", "", "",                                                                                \
    "Network interface whose IPv4 address TCP peers connect to and the listener binds (default: the local end "      \
    "of the route to MASTER_ADDR).")                \
  P("SCALECOMM_HOSTNAME", "", "",                                                                                     \
    "Host identity used to decide which peers share memory (default: hostname and namespaces); rank 0's also "     \
    "names the machine in auto's tuning cache key.")                                                                 \
  P("SCALECOMM_TIMELINE", "", "",                                                                                     \
    "Write a Chrome/Perfetto trace per rank to this path ('{rank}' is replaced, else '.rank<r>' is inserted "        \
    "before the extension; missing folders are created): one span per collective and, inside, per step: send, "  \
    "recv, recv+reduce, wait.")                                                                                       \
  P("SCALECOMM_LAUNCHER_ENV", "1", "0|1",                                                                             \
    "Python: 1 lets 'import pyscalecomm' fill RANK, WORLD_SIZE, MASTER_ADDR, ... from mpirun or srun (not "          \
    "torchrun); 0 leaves the environment alone.")                                                                    \
  P("SCALECOMM_NVTX", "0", "0|1",                                                                                     \
    "1: an NVTX range per collective ('scalecomm:allreduce:ring seq 12 4194304 B') for Nsight Systems (CUDA "        \
    "builds).")                                                                                                      \
  P("SCALECOMM_CUDA", "auto", "auto|0",                                                                               \
    "Build time: 0 builds without CUDA sources even when CUDA is present.")
// clang-format on

namespace params_detail {  // the C++ type of each kind
using Int = int64_t;
using Text = std::string;
}  // namespace params_detail

struct ParamSpec {
  const char* name;          // environment variable, e.g. "SCALECOMM_TRANSPORT"
  const char* option;        // GroupConfig / Options field ("" for a process setting)
  bool integer;              // Int (else Text)
  std::string defaultValue;  // as text
  int64_t lo, hi;            // Int: valid range (hi may be kWorld)
  const char* choices;       // Text: "a|b|c", or "" for any text
  const char* doc;           // one paragraph
};

// Group settings first, in declaration order, then process settings.
const std::vector<ParamSpec>& allParams();
const ParamSpec& paramSpec(const char* name);

// The value set in the environment, else the declared default.
std::string paramString(const char* name);
// True when the variable is set (non-empty) in the environment.
bool paramIsSet(const char* name);

// A size in bytes: a whole number, optionally with a binary prefix K, M, G
// or T (either case, 1K = 1024) and an optional B or iB: "4096", "64K",
// "64KB", "64KiB", "1.5M" (whole bytes). Negative or fractional bytes,
// other suffixes and overflow: nullopt. The one parser for every byte
// setting (the *_BYTES variables, Options fields) and the tools' sizes.
std::optional<int64_t> parseSize(const std::string& text);

// Whether `spec` is a size in bytes (its variable ends in _BYTES): parsed
// with parseSize, and listed as such by the bindings' params().
bool paramIsSize(const ParamSpec& spec);

// Parses `text` as the value of `spec` (a size where paramIsSize, see
// parseSize) and checks it (size: the group's size
// for kWorld bounds, 0 when not yet known). Throws Error(InvalidArgument)
// naming the option, its variable and the valid values.
int64_t parseIntParam(const ParamSpec& spec, const std::string& text);
void checkIntParam(const ParamSpec& spec, int64_t v, int size);
void checkTextParam(const ParamSpec& spec, const std::string& v);

}  // namespace scalecomm
