#include "transport/loopback.h"

#include <cstdlib>

#include "core/error.h"

namespace scalecomm {

struct LoopbackFabric::Ring {
  explicit Ring(size_t bytes) : memory(static_cast<uint8_t*>(std::aligned_alloc(64, sizeof(RingControl) + bytes))) {
    auto* ctl = reinterpret_cast<RingControl*>(memory);
    SpscRing::initialize(ctl);
    ring = SpscRing(ctl, memory + sizeof(RingControl), bytes);
  }
  ~Ring() { std::free(memory); }
  uint8_t* memory;
  SpscRing ring;
};

namespace {

class LoopbackLink : public Link {
 public:
  LoopbackLink(int self, int peer, std::shared_ptr<LoopbackFabric::Ring> out, std::shared_ptr<LoopbackFabric::Ring> in)
      : Link(peer), self_(self), out_(std::move(out)), in_(std::move(in)) {}
  ~LoopbackLink() override { close(); }

  size_t trySend(const void* data, size_t bytes) override {
    checkPeer();
    return out_->ring.write(data, bytes);
  }
  size_t tryRecv(RecvConsumer& consumer) override {
    auto [ptr, avail] = in_->ring.readable();
    if (avail == 0) {
      checkPeer();
      return 0;
    }
    size_t used = consumer.consume(ptr, avail);
    in_->ring.consume(used);
    return used;
  }
  size_t peek(void* out, size_t n) override { return in_->ring.peek(out, n); }
  void checkPeer() override {
    if (out_->ring.closed() || (in_->ring.closed() && in_->ring.empty())) {
      uint32_t by = out_->ring.closed() ? out_->ring.closedBy() : in_->ring.closedBy();
      fail(ErrorKind::Io, "loopback link between rank ", self_, " and rank ", peer_, " was closed by rank ", by);
    }
  }
  void close() override {
    if (!out_->ring.closed()) out_->ring.close(self_);
    if (!in_->ring.closed()) in_->ring.close(self_);
  }
  const char* kind() const override { return "loopback"; }

 private:
  int self_;
  std::shared_ptr<LoopbackFabric::Ring> out_, in_;
};

}  // namespace

LoopbackFabric::LoopbackFabric(int worldSize, size_t ringBytes) : n_(worldSize) {
  SC_CHECK(ringBytes % 64 == 0 && ringBytes > 0);
  for (int i = 0; i < n_ * n_; ++i) rings_.push_back(std::make_shared<Ring>(ringBytes));
}

std::unique_ptr<Link> LoopbackFabric::link(int from, int to) {
  return std::make_unique<LoopbackLink>(from, to, ring(from, to), ring(to, from));
}

}  // namespace scalecomm
