#include "transport/link.h"

#include <cstring>

namespace scalecomm {

namespace {

// Copies what it is offered and takes nothing.
class PeekConsumer : public RecvConsumer {
 public:
  PeekConsumer(void* out, size_t n) : out_(static_cast<uint8_t*>(out)), n_(n) {}
  size_t consume(const uint8_t* data, size_t avail) override {
    copied_ = avail < n_ ? avail : n_;
    std::memcpy(out_, data, copied_);
    return 0;
  }
  size_t copied() const { return copied_; }

 private:
  uint8_t* out_;
  size_t n_;
  size_t copied_ = 0;
};

}  // namespace

size_t Link::peek(void* out, size_t n) {
  PeekConsumer c(out, n);
  tryRecv(c);
  return c.copied();
}

}  // namespace scalecomm
