#include "guest/testguest/session.h"

#include "guest/testguest/agent.h"
#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest {

void Session::Reset(Agent* agent) {
  if (write_.active && agent != nullptr) agent->ReleaseWriteSlot(write_.slot);
  rx_len_ = 0;
  tx_start_ = tx_end_ = 0;
  skip_ = 0;
  close_ = false;
  version_ = wire::kVersion1;
  peer_max_payload_ = wire::kMaxPayload;
  write_ = WriteStream{};
}

void Session::Receive(const uint8_t* data, uint32_t n) {
  if (n > RxFree()) n = RxFree();  // the transport guarantees this never trims
  Copy(rx_ + rx_len_, data, n);
  rx_len_ += n;
}

void Session::Drop(uint32_t n) {
  if (n >= rx_len_) {
    rx_len_ = 0;
    return;
  }
  Move(rx_, rx_ + n, rx_len_ - n);
  rx_len_ -= n;
}

void Session::TxConsume(uint32_t n) {
  if (n > TxSize()) n = TxSize();
  tx_start_ += n;
  if (tx_start_ == tx_end_) tx_start_ = tx_end_ = 0;
}

bool Session::HasCompleteFrame() const {
  if (rx_len_ < wire::kHeaderSize) return false;
  wire::FrameHeader h;
  if (wire::DecodeHeader(rx_, rx_len_, &h) != wire::WireError::kOk) return true;  // an error to report
  return h.payload_len > kMaxRxPayload || rx_len_ - wire::kHeaderSize >= h.payload_len;
}

uint32_t Session::Process(Agent* agent) {
  uint32_t consumed = 0;
  while (!close_) {
    if (skip_ > 0) {
      const uint32_t n = Min(skip_, rx_len_);
      Drop(n);
      consumed += n;
      skip_ -= n;
      if (skip_ > 0) break;
      continue;
    }
    if (rx_len_ < wire::kHeaderSize) {
      // A wrong magic is visible early; do not wait for a header that never makes sense.
      if (rx_len_ < 4 || wire::LoadLe32(rx_) == wire::kMagic) break;
    }
    if (TxFree() < kMaxReply) break;  // backpressure: wait until the peer reads
    wire::FrameHeader h;
    const wire::WireError e = wire::DecodeHeader(rx_, rx_len_, &h);
    if (e == wire::WireError::kBadMagic || e == wire::WireError::kTooLarge ||
        (e == wire::WireError::kTruncated && rx_len_ >= 4)) {
      SendError(0, wire::ErrorCode::kInvalidArgument,
                e == wire::WireError::kTooLarge ? "frame payload above 1 MiB; closing"
                                                : "bad frame magic; closing");
      consumed += rx_len_;
      rx_len_ = 0;
      close_ = true;
      break;
    }
    if (h.payload_len > kMaxRxPayload) {
      agent->RefuseFrame(this, h, wire::ErrorCode::kResourceExhausted,
                         "frame payload above this agent's max_payload; skipped");
      Drop(wire::kHeaderSize);
      consumed += wire::kHeaderSize;
      skip_ = h.payload_len;
      continue;
    }
    if (rx_len_ - wire::kHeaderSize < h.payload_len) break;
    agent->HandleFrame(this, h, rx_ + wire::kHeaderSize);
    const uint32_t total = wire::kHeaderSize + h.payload_len;
    Drop(total);
    consumed += total;
  }
  return consumed;
}

wire::TlvWriter* Session::BeginReply(wire::MsgType type, uint32_t flags, uint32_t id) {
  if (tx_start_ > 0 && kTxCap - tx_end_ < kMaxReply) {
    Move(tx_, tx_ + tx_start_, TxSize());
    tx_end_ -= tx_start_;
    tx_start_ = 0;
  }
  reply_at_ = tx_end_;
  reply_id_ = id;
  reply_type_ = uint16_t(type);
  reply_flags_ = flags | wire::kFlagReply;
  const uint32_t room = kTxCap - tx_end_ - uint32_t(wire::kHeaderSize);
  writer_ = wire::TlvWriter(tx_ + reply_at_ + wire::kHeaderSize, Min(room, peer_max_payload_));
  return &writer_;
}

void Session::EndReply() {
  if (writer_.error() != wire::WireError::kOk) {
    // The reply did not fit the peer's limit: answer with an ERROR instead.
    writer_ = wire::TlvWriter(tx_ + reply_at_ + wire::kHeaderSize, 256);
    writer_.PutU32(wire::Tag::kErrorCode, uint32_t(wire::ErrorCode::kResourceExhausted));
    writer_.PutCStr(wire::Tag::kErrorMessage, "reply larger than the client's max_payload");
    reply_type_ = uint16_t(wire::MsgType::kError);
    reply_flags_ = wire::kFlagReply;
  }
  wire::FrameHeader h;
  h.version = reply_type_ == uint16_t(wire::MsgType::kHello) ? wire::kVersion1 : version_;
  h.type = reply_type_;
  h.flags = reply_flags_;
  h.id = reply_id_;
  h.payload_len = uint32_t(writer_.size());
  wire::EncodeHeader(h, tx_ + reply_at_);
  tx_end_ = reply_at_ + uint32_t(wire::kHeaderSize) + h.payload_len;
}

void Session::SendError(uint32_t id, wire::ErrorCode code, const char* message) {
  wire::TlvWriter* w = BeginReply(wire::MsgType::kError, 0, id);
  w->PutU32(wire::Tag::kErrorCode, uint32_t(code));
  w->PutCStr(wire::Tag::kErrorMessage, message);
  EndReply();
}

}  // namespace kubicle::guest::testguest
