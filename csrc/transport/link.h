// scalecomm transport: a Link is a full-duplex, ordered byte stream to one peer.
//
// Contract:
// - Nonblocking: trySend/tryRecv never block; they move what they can now and
//   return the number of bytes moved (0 when nothing could move).
// - tryRecv hands received bytes to a RecvConsumer, which takes a prefix of
//   them (possibly 0 bytes, e.g. when it needs a whole header or element); the
//   link keeps the rest for the next call. Spans offered are contiguous.
// - Errors (peer closed, peer died, socket error) throw Error(Io) naming the peer.
// - One thread sends and one thread receives at a time (the group's worker
//   thread does both); close() may be called from any thread and makes later
//   calls on both ends fail promptly.
// - peek() copies arrived bytes without consuming them.
// - doorbell() is a wake-up word the waiting thread may sleep on instead of
//   polling (shm: the process's own segment; null elsewhere); the peer rings
//   it whenever it moves bytes on a link to this process, closes one, or
//   posts its window. ready() says this link could move bytes now (data has
//   arrived, or a send that found no room would now find it); a waiter
//   re-checks it after arming, before it sleeps.
// - pollMicros() is how long a waiter keeps polling the link, yielding its
//   core between polls, before it blocks (fixed for the link's life). Short
//   where the peer or the kernel moves the bytes while this side sleeps (shm,
//   tcp); long where bytes move only inside calls into the transport (MPI,
//   its rendezvous handshakes included), as MPI's own blocking calls poll.
// - waitFd() is a pollable descriptor that becomes readable when tryRecv may
//   move bytes (tcp), or -1 (shm, loopback: the caller spins/yields instead);
//   sendBlocked() says the last trySend could not take all its bytes, so a
//   waiter also polls sendWaitFd() for writability.
// Links own their resources (RAII); destroying a link closes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace scalecomm {

// A wake-up word in memory that several processes map (see Link::doorbell).
// A waiter reads key(), arm()s (a full fence: a ringer that does not see the
// waiter armed published its bytes before the waiter's re-check), re-checks
// its condition, then sleep()s unless the key has moved since, and disarm()s.
// ring() wakes every armed sleeper; it costs a fence and a load when none is.
class Doorbell {
 public:
  virtual uint32_t key() const = 0;
  virtual void arm() = 0;
  virtual void disarm() = 0;
  // Sleeps until rung or timeoutUs passed; true when rung (or rung after key()).
  virtual bool sleep(uint32_t key, int64_t timeoutUs) = 0;
  virtual void ring() = 0;

 protected:
  ~Doorbell() = default;
};

class RecvConsumer {
 public:
  virtual ~RecvConsumer() = default;
  // Consumes a prefix of [data, data+avail); returns how many bytes it took.
  virtual size_t consume(const uint8_t* data, size_t avail) = 0;
};

class Link {
 public:
  virtual ~Link() = default;
  virtual size_t trySend(const void* data, size_t bytes) = 0;
  virtual size_t tryRecv(RecvConsumer& consumer) = 0;
  // Checks that the peer is still there; throws Error(Io) if not. Cheap enough
  // to call every few milliseconds while waiting.
  virtual void checkPeer() = 0;
  // Tells the peer this process lives, for transports that cannot see it
  // otherwise (shm across PID namespaces). Any thread, about every 100 ms.
  virtual void heartbeat() {}
  // Moves bytes already handed to trySend towards the peer where the
  // transport needs the sender's help for that (MPI's tcp transport connects
  // and writes only inside MPI calls). Where needsProgress() holds (fixed for
  // the link's life), the waiting thread calls it while it idles, whichever
  // peers it waits for.
  virtual bool needsProgress() const { return false; }
  virtual void progress() {}
  // Short: on slow links waits last milliseconds, and polling through them
  // burned a core that DDP's backward on the same core needed (2 ranks,
  // 1 Gbit/s: step 44.8 ms with 2 ms of yielding against gloo's 42.2).
  static constexpr int64_t kDefaultPollMicros = 200;
  virtual int64_t pollMicros() const { return kDefaultPollMicros; }
  // Marks the link closed in both directions (idempotent, any thread).
  virtual void close() = 0;
  virtual Doorbell* doorbell() { return nullptr; }
  virtual bool ready() const { return true; }
  virtual int waitFd() const { return -1; }
  virtual int sendWaitFd() const { return waitFd(); }
  virtual bool sendBlocked() const { return false; }
  // Copies up to n bytes that have arrived, without consuming them (receive
  // from any source looks at each peer's next header); may throw the link's
  // error where fewer than n bytes arrived and the peer closed its end. The
  // default stages through tryRecv with a consumer that takes nothing; tcp
  // (whose end of stream follows its staged bytes) and ring transports
  // override it.
  virtual size_t peek(void* out, size_t n);
  virtual const char* kind() const = 0;
  int peer() const { return peer_; }

 protected:
  explicit Link(int peer) : peer_(peer) {}
  int peer_;
};

}  // namespace scalecomm
