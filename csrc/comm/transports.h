// scalecomm comm: the transports a mesh can connect a pair of ranks with.
//
// Contract:
// - transportRegistry() lists every transport in priority order (shm, mpi,
//   tcp). Connecting a mesh is: each allowed transport publishes what a peer
//   needs (publish), the ranks exchange those fields through the store, then
//   for every peer the first transport in priority order that can connect
//   both ends (whyNot returns "") makes the link (connect).
// - whyNot() answers the same on both ends of a pair: it reads only fields
//   both ranks see (their published info, the group's MPI communicator).
// - connect() is called for peers in increasing rank order on every rank;
//   a transport that needs one end to wait for the other (tcp: the higher rank
//   connects, the lower accepts) relies on that order to avoid a cycle.
// - finish() runs after every rank has made all its links (shm removes its
//   segment's name here, so nothing outlives the group in /dev/shm, and sets
//   up the shared windows when every rank is linked by shm).
// A new transport is one Transport subclass plus one registry entry.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "core/store.h"
#include "transport/link.h"
#include "transport/mpi_runtime.h"
#include "transport/shm.h"

namespace scalecomm {

struct MeshOptions;

// What the rendezvous learned, shared with the transports while they connect.
struct Rendezvous {
  Store& store;
  std::string prefix;  // store keys of this generation of the group
  int rank = 0;
  int size = 0;
  const MeshOptions& opts;
  Deadline deadline;
  // This generation's random nonce (rank 0's, through the store): the same on
  // every rank, new for every creation of the group.
  std::string nonce;
  // This generation's secret: the nonce plus SCALECOMM_SECRET when set (never
  // in the store). Proves membership to tcp peers.
  std::string key;
  std::vector<std::map<std::string, std::string>> infos;  // what each rank published (infos[rank]: ours)
  std::shared_ptr<MpiGroup> mpiGroup;                     // null unless every rank is in one MPI job
  std::shared_ptr<ShmWindows> windows;                    // set by shm's finish() when every rank shares memory

  // Field `key` of rank r's info ("" when absent).
  std::string field(int r, const std::string& key) const;
  // Whether `peer` runs on this rank's host (the "host" identity each rank published).
  bool sameHost(int peer) const { return field(peer, "host") == field(rank, "host"); }
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Prepares this rank's end (segments, listeners) and adds the fields peers need.
  virtual void publish(Rendezvous& rv, std::map<std::string, std::string>& info) = 0;
  // "" when this transport can link this rank with `peer`, else why not (for errors).
  virtual std::string whyNot(const Rendezvous& rv, int peer) const = 0;
  virtual std::unique_ptr<Link> connect(Rendezvous& rv, int peer) = 0;
  virtual void finish(Rendezvous&) {}
};

struct TransportEntry {
  const char* name;
  std::unique_ptr<Transport> (*make)();
};

// Every transport, highest priority first.
const std::vector<TransportEntry>& transportRegistry();
// "shm, mpi, tcp" (for messages).
std::string transportNames();

}  // namespace scalecomm
