#include "guest/agent/connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "guest/agent/agent_log.h"

namespace kubicle::guest::agent {

using protocol::Frame;
using protocol::MsgType;

namespace {
uint64_t g_next_serial = 1;
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kRxCap = protocol::kHeaderSize + protocol::kMaxPayload;
// Overhead of a data frame's TLVs besides the data (offset, size, stream).
constexpr size_t kChunkOverhead = 64;
}  // namespace

Connection::Connection(Loop* loop, UniqueFd fd, std::string peer, ConnectionSink* sink)
    : loop_(loop), fd_(std::move(fd)), peer_(std::move(peer)), sink_(sink),
      serial_(g_next_serial++) {}

Connection::~Connection() {
  if (token_ != 0) loop_->Unwatch(token_);
  if (grace_timer_ != 0) loop_->CancelTimer(grace_timer_);
}

Status Connection::Start() {
  ASSIGN_OR_RETURN(token_, loop_->Watch(fd_.get(), EPOLLIN, [this](uint32_t ev) { OnEvents(ev); }));
  return Status::Ok();
}

size_t Connection::MaxChunk() const {
  return std::min<size_t>(protocol::kMaxChunk, peer_max_payload_ - kChunkOverhead);
}

void Connection::Send(MsgType type, uint32_t id, uint32_t flags, std::vector<uint8_t> payload) {
  // After a connection-level ERROR nothing more is sent: it is the last frame.
  if (closed_ || draining_to_close_) return;
  if (payload.size() > peer_max_payload_) {
    SendError(id, Status::ResourceExhausted(protocol::MsgTypeName(type) + " reply of " +
                                            std::to_string(payload.size()) +
                                            " bytes exceeds the client's max_payload"));
    return;
  }
  Frame f;
  f.type = type;
  f.id = id;
  f.flags = flags | protocol::kFlagReply;
  f.version = type == MsgType::kHello ? protocol::kVersion1 : version_;
  f.payload = std::move(payload);
  auto bytes = protocol::EncodeFrame(f);
  if (!bytes.ok()) return;  // unreachable: payload is within kMaxPayload
  tx_bytes_ += bytes->size();
  tx_.push_back(std::move(*bytes));
  if (Congested()) was_congested_ = true;
  UpdateInterest();
}

void Connection::SendError(uint32_t id, const Status& status) {
  protocol::ErrorReply e = protocol::ErrorReply::FromStatus(status);
  Send(MsgType::kError, id, 0, e.Encode());
}

void Connection::AddProducer(std::unique_ptr<Producer> p) {
  producers_.push_back(std::move(p));
  Pump();
}

void Connection::ResumeReading() {
  if (read_pauses_ > 0) --read_pauses_;
  UpdateInterest();
  // Frames that arrived while we were paused are still buffered.
  if (read_pauses_ == 0) ParseFrames();
}

void Connection::UpdateInterest() {
  if (closed_ || token_ == 0) return;
  uint32_t ev = 0;
  if (!tx_.empty()) ev |= EPOLLOUT;
  // While congested we still read (up to the RX cap) so that stream input
  // (stdin, file chunks) keeps flowing to a peer that is busy sending.
  if (!draining_to_close_ && read_pauses_ == 0 && rx_.size() - rx_start_ < kRxCap) ev |= EPOLLIN;
  loop_->Modify(token_, ev);
}

void Connection::OnEvents(uint32_t events) {
  if (closed_) return;
  if (events & EPOLLOUT) Flush();
  if (closed_) return;
  if (events & EPOLLIN) ReadSome();
  // HUP/ERR are reported even without interest: a peer that is gone for good
  // cannot read replies, so do not spin on it while reading is paused.
  if (!closed_ && (events & (EPOLLHUP | EPOLLERR))) Close("peer hung up");
}

void Connection::ReadSome() {
  if (draining_to_close_ || read_pauses_ > 0) return;  // readiness raced with a pause
  if (rx_start_ > 0) {
    rx_.erase(rx_.begin(), rx_.begin() + std::ptrdiff_t(rx_start_));
    rx_start_ = 0;
  }
  const size_t room = kRxCap - rx_.size();
  const size_t want = std::min(kReadChunk, room);
  if (want == 0) return UpdateInterest();  // full: wait until frames are consumed
  const size_t old = rx_.size();
  rx_.resize(old + want);
  const ssize_t n = ::recv(fd_.get(), rx_.data() + old, want, 0);
  rx_.resize(old + (n > 0 ? size_t(n) : 0));
  if (n == 0) return Close("peer closed the connection");
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    return Close(std::string("recv: ") + strerror(errno));
  }
  ParseFrames();
  UpdateInterest();
}

void Connection::ParseFrames() {
  if (parsing_) return;  // a handler resumed us: the outer loop goes on
  parsing_ = true;
  ParseLoop();
  parsing_ = false;
}

void Connection::ParseLoop() {
  while (!closed_ && !draining_to_close_ && read_pauses_ == 0) {
    const uint8_t* p = rx_.data() + rx_start_;
    const size_t avail = rx_.size() - rx_start_;
    protocol::FrameHeader h;
    const protocol::WireError e = protocol::DecodeHeader(p, avail, &h);
    if (e == protocol::WireError::kTruncated) {
      if (avail >= 4 && protocol::LoadLe32(p) != protocol::kMagic) {
        return FatalFramingError("bad frame magic");
      }
      return;
    }
    if (e != protocol::WireError::kOk) {
      return FatalFramingError(e == protocol::WireError::kTooLarge
                                   ? "frame payload of " + std::to_string(h.payload_len) +
                                         " bytes is above the 1 MiB limit"
                                   : "bad frame magic");
    }
    if (avail - protocol::kHeaderSize < h.payload_len) return;
    // Congested: only stream input goes on (its replies are at most one
    // small frame per stream); requests with big replies wait for the peer
    // to read. Without this a client that sends all of stdin before reading
    // output would deadlock against a process echoing it.
    const auto type = MsgType(h.type);
    if (Congested() && type != MsgType::kExecStdin && type != MsgType::kFileWrite) return;
    Frame f;
    f.type = MsgType(h.type);
    f.flags = h.flags;
    f.id = h.id;
    f.version = h.version;
    f.payload.assign(p + protocol::kHeaderSize, p + protocol::kHeaderSize + h.payload_len);
    rx_start_ += protocol::kHeaderSize + h.payload_len;
    // A handler may congest us or pause reading: the rest stays buffered
    // (bounded by kRxCap) until we are allowed to go on.
    sink_->OnFrame(*this, std::move(f));
  }
}

void Connection::FatalFramingError(const std::string& why) {
  LogWarn("connection framing lost", "peer=" + peer_ + " reason=\"" + why + "\"");
  SendError(0, Status::InvalidArgument(why + "; closing the connection"));
  draining_to_close_ = true;
  producers_.clear();  // streamed replies end here, unanswered like the rest
  rx_.clear();
  rx_start_ = 0;
  UpdateInterest();
  // Do not wait forever for a peer that never reads its ERROR.
  grace_timer_ = loop_->AddTimer(SteadyClock::now() + std::chrono::seconds(2), [this] {
    grace_timer_ = 0;
    Close("framing error");
  });
}

void Connection::Flush() {
  while (!tx_.empty()) {
    iovec iov[16];
    int cnt = 0;
    size_t off = tx_front_off_;
    for (auto it = tx_.begin(); it != tx_.end() && cnt < 16; ++it, ++cnt) {
      iov[cnt].iov_base = it->data() + off;
      iov[cnt].iov_len = it->size() - off;
      off = 0;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(cnt);
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      return Close(std::string("send: ") + strerror(errno));
    }
    size_t left = size_t(n);
    tx_bytes_ -= left;
    while (left > 0) {
      const size_t front = tx_.front().size() - tx_front_off_;
      if (left < front) {
        tx_front_off_ += left;
        left = 0;
      } else {
        left -= front;
        tx_.pop_front();
        tx_front_off_ = 0;
      }
    }
  }
  if (tx_.empty() && draining_to_close_) return Close("framing error");
  if (Congested()) {
    was_congested_ = true;
  } else {
    Pump();
    if (was_congested_ && tx_bytes_ < kLowWater) {
      was_congested_ = false;
      sink_->OnDrained(*this);
      if (closed_) return;
    }
    ParseFrames();  // requests that waited for room
    if (closed_) return;
  }
  UpdateInterest();
}

void Connection::Pump() {
  if (pumping_) return;  // a producer's Send must not recurse into Pump
  pumping_ = true;
  while (!closed_ && !producers_.empty() && !Congested()) {
    std::unique_ptr<Producer> p = std::move(producers_.front());
    producers_.pop_front();
    if (!p->Produce(*this)) producers_.push_back(std::move(p));  // round robin
  }
  pumping_ = false;
  if (Congested()) was_congested_ = true;
}

void Connection::Close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  LogDebug("connection closed", "peer=" + peer_ + " reason=\"" + reason + "\"");
  if (token_ != 0) loop_->Unwatch(token_);
  token_ = 0;
  if (grace_timer_ != 0) loop_->CancelTimer(grace_timer_);
  grace_timer_ = 0;
  producers_.clear();
  tx_.clear();
  tx_bytes_ = 0;
  ::shutdown(fd_.get(), SHUT_RDWR);
  sink_->OnClosed(*this);
}

}  // namespace kubicle::guest::agent
