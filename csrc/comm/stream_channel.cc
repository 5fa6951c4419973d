#include "comm/stream_channel.h"

#include <algorithm>
#include <cstring>

#include "comm/communicator.h"

namespace scalecomm {

namespace {
const uint8_t kZeros[kWireAlign] = {0};
}  // namespace

// One peer's message being received: header, payload, padding.
class StreamChannel::Incoming final : public RecvConsumer {
 public:
  enum Stage { Idle, Header, Payload, Pad, Done };

  void begin(const ChannelMessage& m, Reducer& reducer, const HeaderCheck& check) {
    m_ = m;
    want_ = *m.header;
    reducer_ = &reducer;
    check_ = &check;
    es_ = elementSize(m.dtype);
    payload_ = static_cast<uint64_t>(want_.payloadBytes);
    pad_ = paddedMessageBytes(want_.payloadBytes) - sizeof(WireHeader) - payload_;
    pos_ = 0;
    stage_ = Header;
  }
  Stage stage() const { return stage_; }
  void reset() { stage_ = Idle; }

  size_t consume(const uint8_t* data, size_t avail) override {
    size_t used = 0;
    if (stage_ == Header) {
      if (avail < sizeof(WireHeader)) return 0;
      WireHeader got;
      std::memcpy(&got, data, sizeof(got));
      if (std::memcmp(&got, &want_, sizeof(got)) != 0) check_->mismatch(m_.peer, got, want_);
      used = sizeof(WireHeader);
      stage_ = payload_ > 0 ? Payload : (pad_ > 0 ? Pad : Done);
      pos_ = 0;
    }
    if (stage_ == Payload) {
      uint64_t take = std::min<uint64_t>(avail - used, payload_ - pos_);
      take -= take % es_;
      if (take > 0) {
        if (m_.op != ReduceOp::None) {
          reducer_->reduce(m_.data + pos_, data + used, static_cast<int64_t>(take / es_), m_.dtype, m_.op);
        } else {
          std::memcpy(m_.data + pos_, data + used, take);
        }
        pos_ += take;
        used += take;
      }
      if (pos_ == payload_) {
        stage_ = pad_ > 0 ? Pad : Done;
        pos_ = 0;
      }
    }
    if (stage_ == Pad) {
      uint64_t take = std::min<uint64_t>(avail - used, pad_ - pos_);
      pos_ += take;
      used += take;
      if (pos_ == pad_) stage_ = Done;
    }
    return used;
  }

 private:
  ChannelMessage m_{};
  WireHeader want_{};
  Reducer* reducer_ = nullptr;
  const HeaderCheck* check_ = nullptr;
  size_t es_ = 1;
  uint64_t payload_ = 0, pad_ = 0, pos_ = 0;
  Stage stage_ = Idle;
};

StreamChannel::StreamChannel(Communicator& comm) : HostChannel(comm), reducer_(&hostReducer()), out_(comm.size()) {
  for (int p = 0; p < comm.size(); ++p) in_.push_back(std::make_unique<Incoming>());
}

StreamChannel::~StreamChannel() = default;

void StreamChannel::start() {
  for (auto& o : out_) o.active = false;
  for (auto& i : in_) i->reset();
}

Channel::Progress StreamChannel::send(const ChannelMessage& m) {
  Outgoing& sp = out_[m.peer];
  Link& link = comm_.link(m.peer);
  if (!sp.active) {
    sp.active = true;
    sp.pos = 0;
    sp.hdr = *m.header;
    if (sp.hdr.collective != static_cast<uint8_t>(CollectiveKind::SendRecv)) collectiveTraffic_ = true;
    const int64_t payload = sp.hdr.payloadBytes;
    const uint64_t total = paddedMessageBytes(payload);
    sp.small = total <= kSmallMessage;
    if (sp.small) {
      std::memcpy(sp.buf.data(), &sp.hdr, sizeof(WireHeader));
      std::memcpy(sp.buf.data() + sizeof(WireHeader), m.data, static_cast<size_t>(payload));
      std::memset(sp.buf.data() + sizeof(WireHeader) + payload, 0, total - sizeof(WireHeader) - payload);
    }
  }
  const int64_t payload = sp.hdr.payloadBytes;
  const uint64_t total = paddedMessageBytes(payload);
  bool moved = false;
  while (sp.pos < total) {
    size_t n;
    if (sp.small) {
      n = link.trySend(sp.buf.data() + sp.pos, total - sp.pos);
    } else if (sp.pos < sizeof(WireHeader)) {
      n = link.trySend(reinterpret_cast<const uint8_t*>(&sp.hdr) + sp.pos, sizeof(WireHeader) - sp.pos);
    } else if (sp.pos < sizeof(WireHeader) + payload) {
      const uint64_t off = sp.pos - sizeof(WireHeader);
      n = link.trySend(m.data + off, payload - off);
    } else {
      n = link.trySend(kZeros, total - sp.pos);
    }
    if (n == 0) return moved ? Progress::Partial : Progress::None;
    moved = true;
    sp.pos += n;
  }
  sp.active = false;
  return Progress::Done;
}

Channel::Progress StreamChannel::recv(const ChannelMessage& m, const HeaderCheck& check) {
  Incoming& rp = *in_[m.peer];
  if (rp.stage() == Incoming::Idle) {
    rp.begin(m, *reducer_, check);
    if (m.header->collective != static_cast<uint8_t>(CollectiveKind::SendRecv)) collectiveTraffic_ = true;
  }
  bool moved = false;
  while (rp.stage() != Incoming::Done) {
    if (comm_.link(m.peer).tryRecv(rp) == 0) return moved ? Progress::Partial : Progress::None;
    moved = true;
  }
  if (m.op != ReduceOp::None) reducer_->fence();  // later tasks may send this memory
  rp.reset();
  return Progress::Done;
}

void StreamChannel::idle(const std::vector<int>& peers, Clock::time_point idleSince) { comm_.idle(peers, idleSince); }

}  // namespace scalecomm
