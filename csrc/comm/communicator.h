// scalecomm comm: a Communicator is one rank's set of links to its peers.
//
// Contract:
// - Owns one Link per peer (nullptr for itself), built by connectMesh() through
//   the store: per peer the first transport of comm/transports.h (shm, mpi,
//   tcp) that can connect both ends, or the one config forces; or handed in
//   directly (tests, loopback).
// - When every rank is linked by shm (one host), it holds every rank's shared
//   window (windows()), which the `shared` algorithms use.
// - When every rank runs in one MPI job (and SCALECOMM_MPI is not 0), it also
//   holds an MPI communicator over the group (mpiGroup()), which the mpi link
//   and the `mpi` passthrough algorithm use; otherwise mpiGroup() is null.
//   When every pair is linked by mpi and every rank asked for it
//   (mpiZeroCopy), collectiveChannel() is an mpi channel on a duplicate of it.
// - channel() is the stream channel over these links, which the executor
//   runs plans on.
// - idle() is how an executor waits: it spins, yields, then polls tcp sockets
//   (or sleeps briefly for shm), and throws once abort() was called. A wait
//   on a blocking call's own thread (a CallerWaits alive on it) spins for
//   callerSpin().budget() instead of spinMicros(): callerSpinMicros() or
//   spinMicros(), whichever its calls measured faster (comm/caller_spin.h;
//   told by callerCallEnded()).
// - abort() (any thread, idempotent) sets the abort flag and closes every link,
//   so this rank's waits end promptly and peers see the closure. leave()
//   closes them in order.
// Thread safety: one worker thread drives the links; abort()/aborted() are
// callable from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/caller_spin.h"
#include "comm/channel.h"
#include "core/deadline.h"
#include "core/store.h"
#include "transport/link.h"
#include "transport/mpi_runtime.h"
#include "transport/shm.h"

namespace scalecomm {

class StreamChannel;

struct MeshOptions {
  std::string transport = "auto";    // auto | shm | tcp | mpi
  bool useMpi = true;                // build an MPI communicator when all ranks run under MPI
  uint64_t mpiChunkBytes = 1 << 20;  // largest message of an mpi link
  bool mpiZeroCopy = true;           // collectives on the mpi channel when every pair is mpi
  int tcpStreams = 1;                // sockets per tcp link (the pair takes the smaller value)
  uint64_t shmRingBytes = 1 << 20;
  uint64_t shmWindowBytes = 0;  // per window cell (transport/shm.h); 0: no windows
  std::string hostIdentity;     // empty: computed
  int64_t spinMicros = 50;
};

// While alive, the waits of this thread in Communicator::idle() are those of
// a blocking call on its caller's own thread (callerSpinMicros). Nests.
class CallerWaits {
 public:
  CallerWaits();
  ~CallerWaits();
  CallerWaits(const CallerWaits&) = delete;
  CallerWaits& operator=(const CallerWaits&) = delete;
  static bool active();
};

class Communicator {
 public:
  Communicator(int rank, int size, std::vector<std::unique_ptr<Link>> links, int64_t spinMicros = 50);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  Link& link(int peer) const { return *links_[peer]; }
  // The executor's view of these links (comm/stream_channel.h).
  StreamChannel& channel() { return *channel_; }
  // Where collectives run on host memory: the mpi channel when connectMesh
  // made one (comm/mpi_channel.h), else channel(). Point-to-point calls stay
  // on channel() (receive from any source peeks the links).
  Channel& collectiveChannel();
  void setCollectiveChannel(std::unique_ptr<Channel> ch) { mpiChannel_ = std::move(ch); }
  bool collectivesOnMpi() const { return mpiChannel_ != nullptr; }
  bool hasLink(int peer) const { return links_[peer] != nullptr; }
  // Every link's Link::heartbeat (the group's watchdog, every 100 ms; any thread).
  void heartbeat() {
    for (auto& l : links_)
      if (l) l->heartbeat();
  }
  // Host index of every rank (0 = rank 0's host, numbered by first rank);
  // all zeros unless set by connectMesh() or a test.
  const std::vector<int>& hostOf() const { return hostOf_; }
  void setHostOf(std::vector<int> hostOf);
  // Machine index of every rank, numbered alike: ranks under one kernel share
  // its cores, whether or not they share a host (emulated hosts in network
  // namespaces, containers). All zeros unless set by connectMesh() or a test.
  const std::vector<int>& machineOf() const { return machineOf_; }
  void setMachineOf(std::vector<int> machineOf);
  // The machine runs more of the group's ranks than it has cores: a wait on
  // a socket link (a peer on another host) blocks in poll() after the spin
  // instead of yielding first, since a yielding rank keeps taking a core back
  // from the ranks that compute on it.
  void setCrowded(bool crowded);
  const std::shared_ptr<MpiGroup>& mpiGroup() const { return mpi_; }
  // Store keys of this group's generation ("" unless made by connectMesh()).
  const std::string& storePrefix() const { return storePrefix_; }
  void setStorePrefix(std::string p) { storePrefix_ = std::move(p); }
  void setMpiGroup(std::shared_ptr<MpiGroup> g) { mpi_ = std::move(g); }
  // Every rank's shared window (transport/shm.h) when all ranks share this
  // host's memory over shm links and windows are on; else null.
  ShmWindows* windows() const { return windows_.get(); }
  void setWindows(std::shared_ptr<ShmWindows> w) { windows_ = std::move(w); }

  // Idles briefly until something may have changed on the given peers' links:
  // spins for spinMicros after idleSince, then yields until the longest of
  // the peers' links' pollMicros() (transport/link.h; 0 for sockets on a
  // crowded machine), then blocks: in
  // poll() on tcp sockets; on the process's shm doorbell when every peer's
  // link rings it, after re-checking `ready` (default: any of those links is
  // ready(); a caller waiting for something else that its peers ring the
  // doorbell for, such as a shared window, passes its own condition); else
  // sleeps in short slices. Never blocks longer than ~1 ms. Calls progress()
  // first on every link that needs it. Throws Error(Aborted) after abort().
  // The caller checks its deadline.
  void idle(const std::vector<int>& peers, Clock::time_point idleSince, const std::function<bool()>& ready = {});
  // A blocking call run on its caller's thread, started at `started`, ended
  // (Group, under its exec lock): the caller's spin choice
  // (comm/caller_spin.h) measures by it. No clock read where nothing adapts.
  void callerCallEnded(Clock::time_point started) {
    if (callerSpin_.adapts())
      callerSpin_.callEnded(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
  }
  // Times idle() blocked or slept, and of those the times a doorbell woke it.
  struct IdleCounts {
    uint64_t blocked = 0, rung = 0;
  };
  IdleCounts idleCounts() const { return {idleBlocked_, idleRung_}; }
  int64_t spinMicros() const { return spinMicros_; }
  void setSpinMicros(int64_t us) {
    spinMicros_ = us;
    callerSpin_ = CallerSpin(us, us);
  }
  // The longer spin of waits on a blocking call's own thread (CallerWaits):
  // its caller runs nothing else meanwhile, so a longer spin costs the
  // process no work of its own, where a yield hands the core to other work
  // and waits a time slice for it back; unless the peer needs this core
  // (then callerSpin() measures spinMicros() cheaper and runs it).
  // setSpinMicros sets both to one value (nothing to choose).
  int64_t callerSpinMicros() const { return callerSpinLong_; }
  void setCallerSpinMicros(int64_t us) {
    callerSpinLong_ = us;
    callerSpin_ = CallerSpin(us, spinMicros_);
  }
  const CallerSpin& callerSpin() const { return callerSpin_; }

  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  void closeLinks();
  // Sends the leave notice (comm/wire.h) on every link, within `bound`, then
  // closes them: the peers tell a rank that left in order from one that
  // died. Only when no call is in flight and none failed (every stream is at
  // a message boundary); a link whose peer is gone or does not take the notice
  // in time is closed without it.
  void leave(std::chrono::milliseconds bound);

  // Builds links to every peer through the store. `groupKey` namespaces keys.
  static std::unique_ptr<Communicator> connectMesh(Store& store, const std::string& groupKey, int rank, int size,
                                                   const MeshOptions& opts, const Deadline& deadline);

 private:
  int rank_;
  int size_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<Link*> progressed_;    // the links whose needsProgress() holds
  std::vector<int64_t> pollMicros_;  // per peer: its link's pollMicros(), or 0 (setCrowded)
  int64_t shortestPollMicros_ = Link::kDefaultPollMicros, longestPollMicros_ = Link::kDefaultPollMicros;
  int64_t spinMicros_;
  int64_t callerSpinLong_;
  CallerSpin callerSpin_;                    // the executing thread's (a caller's, under the group's exec lock)
  uint64_t idleBlocked_ = 0, idleRung_ = 0;  // the executing thread's
  std::vector<int> hostOf_, machineOf_;
  std::shared_ptr<MpiGroup> mpi_;  // null without MPI; mpi links hold their own reference
  std::shared_ptr<ShmWindows> windows_;
  std::string storePrefix_;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<StreamChannel> channel_;
  std::unique_ptr<Channel> mpiChannel_;  // reset first in the destructor: it uses the links
};

// Identity of this host for choosing shm: hostname plus IPC namespace, or
// SCALECOMM_HOSTNAME when set.
std::string hostIdentity();

}  // namespace scalecomm
