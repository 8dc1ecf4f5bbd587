#include "vmm/devices/virtio/vsock_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "vmm/devices/virtio/chain_io.h"

namespace kubicle::vmm::devices::virtio {
namespace {

constexpr size_t kMaxConnectLine = 32;        // "CONNECT 4294967295\r\n" fits
constexpr uint32_t kMaxRwPayload = 64 * 1024;  // VIRTIO_VSOCK_MAX_PKT_BUF_SIZE

Result<uint32_t> ParseConnectLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  constexpr std::string_view kPrefix = "CONNECT ";
  if (line.substr(0, kPrefix.size()) != kPrefix)
    return Status::InvalidArgument("expected CONNECT <port>");
  std::string_view digits = line.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 10) return Status::InvalidArgument("bad CONNECT port");
  uint64_t port = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return Status::InvalidArgument("bad CONNECT port");
    port = port * 10 + static_cast<uint64_t>(c - '0');
  }
  if (port > UINT32_MAX) return Status::InvalidArgument("CONNECT port out of range");
  return static_cast<uint32_t>(port);
}

}  // namespace

VsockConnection::VsockConnection(uint64_t id, UniqueFd fd, State state, uint32_t buf_alloc)
    : id_(id), fd_(std::move(fd)), state_(state), buf_alloc_(buf_alloc) {}

Result<std::optional<uint32_t>> VsockConnection::ReadConnectLine() {
  char buf[kMaxConnectLine];
  ssize_t n;
  do {
    n = ::recv(fd_.get(), buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::optional<uint32_t>();
  if (n < 0) return Status::FromErrno("recv CONNECT line");
  if (n == 0) return Status::Unavailable("host peer closed before CONNECT");
  const char* nl = static_cast<const char*>(std::memchr(buf, '\n', static_cast<size_t>(n)));
  if (nl == nullptr) {
    if (static_cast<size_t>(n) == sizeof(buf)) return Status::InvalidArgument("CONNECT line too long");
    return std::optional<uint32_t>();  // split across writes: wait for the rest
  }
  // Consume exactly the line; later bytes are stream data for the guest.
  const size_t line_len = static_cast<size_t>(nl - buf) + 1;
  char line[kMaxConnectLine];
  if (::recv(fd_.get(), line, line_len, MSG_DONTWAIT) != static_cast<ssize_t>(line_len))
    return Status::FromErrno("recv CONNECT line");
  ASSIGN_OR_RETURN(uint32_t port, ParseConnectLine(std::string_view(line, line_len - 1)));
  readable_ = true;  // bytes may follow the line already
  return std::optional<uint32_t>(port);
}

bool VsockConnection::AcceptRw(uint32_t len) {
  // A compliant guest sends at most buf_alloc - (tx_cnt - fwd_cnt) with the
  // newest fwd_cnt it has seen, which is at most last_fwd_cnt_sent_. Since
  // fwd_cnt_ >= last_fwd_cnt_sent_, this also bounds tx_buf_ by buf_alloc.
  const uint64_t in_flight = uint64_t{static_cast<uint32_t>(rx_cnt_ - last_fwd_cnt_sent_)} + len;
  if (in_flight > buf_alloc_) return false;
  rx_cnt_ += len;
  return true;
}

void VsockConnection::OnBytesSent(size_t n) {
  const size_t text = std::min(n, tx_uncounted_);
  tx_uncounted_ -= text;
  fwd_cnt_ += static_cast<uint32_t>(n - text);
}

Status VsockConnection::SendToHost(std::span<const iovec> iov, bool guest_data) {
  if (buffered() > 0) RETURN_IF_ERROR(FlushToHost());
  size_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  size_t sent = 0;
  if (buffered() == 0 && total > 0) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov.data());
    m.msg_iovlen = iov.size();
    ssize_t n;
    do {
      n = ::sendmsg(fd_.get(), &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Status::FromErrno("send to host");
    sent = n > 0 ? static_cast<size_t>(n) : 0;
    if (guest_data) fwd_cnt_ += static_cast<uint32_t>(sent);
  }
  if (sent == total) return Status::Ok();
  // Keep the rest; AcceptRw bounds how much guest data can pile up here.
  if (tx_off_ > 0 && tx_off_ >= tx_buf_.size() / 2) {
    tx_buf_.erase(tx_buf_.begin(), tx_buf_.begin() + static_cast<ptrdiff_t>(tx_off_));
    tx_off_ = 0;
  }
  size_t skip = sent;
  for (const iovec& v : iov) {
    const auto* p = static_cast<const uint8_t*>(v.iov_base);
    size_t len = v.iov_len;
    size_t s = std::min(skip, len);
    skip -= s;
    tx_buf_.insert(tx_buf_.end(), p + s, p + len);
  }
  if (!guest_data) tx_uncounted_ += total - sent;
  return Status::Ok();
}

Status VsockConnection::SendToHost(std::string_view text) {
  iovec v{const_cast<char*>(text.data()), text.size()};
  return SendToHost(std::span<const iovec>(&v, 1), false);
}

Status VsockConnection::FlushToHost() {
  while (buffered() > 0) {
    ssize_t n = ::send(fd_.get(), tx_buf_.data() + tx_off_, buffered(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) return Status::FromErrno("send to host");
    tx_off_ += static_cast<size_t>(n);
    OnBytesSent(static_cast<size_t>(n));
  }
  if (buffered() == 0 && !tx_buf_.empty()) {
    // Give the memory back: an idle VM should hold no buffers.
    std::vector<uint8_t>().swap(tx_buf_);
    tx_off_ = 0;
  }
  MaybeShutdownHostWrite();
  return Status::Ok();
}

void VsockConnection::MaybeShutdownHostWrite() {
  if ((guest_shut_ & kVsockShutdownSend) && buffered() == 0 && !host_wr_shut_) {
    ::shutdown(fd_.get(), SHUT_WR);
    host_wr_shut_ = true;
  }
}

void VsockConnection::OnHostEvent(uint32_t events) {
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) readable_ = true;
  if (events & EPOLLRDHUP) host_rdhup_ = true;
  if (events & (EPOLLHUP | EPOLLERR)) {
    host_rdhup_ = host_hup_ = true;
    if (host_eof_) shutdown_want_ |= kVsockShutdownRcv;
  }
}

void VsockConnection::OnGuestCredit(uint32_t buf_alloc, uint32_t fwd_cnt) {
  if (buf_alloc != peer_buf_alloc_ || fwd_cnt != peer_fwd_cnt_) credit_requested_ = false;
  peer_buf_alloc_ = buf_alloc;
  peer_fwd_cnt_ = fwd_cnt;
}

void VsockConnection::OnGuestShutdown(uint32_t flags) {
  guest_shut_ |= flags & kVsockShutdownBoth;
  MaybeShutdownHostWrite();
}

uint32_t VsockConnection::PeerFree() const {
  const uint32_t in_flight = tx_cnt_ - peer_fwd_cnt_;
  return in_flight >= peer_buf_alloc_ ? 0 : peer_buf_alloc_ - in_flight;
}

bool VsockConnection::WantsRead() const {
  return state_ == State::kEstablished && readable_ && !host_eof_ &&
         !(guest_shut_ & kVsockShutdownRcv);
}

bool VsockConnection::NeedsCreditUpdate() const {
  if (state_ != State::kEstablished) return false;
  if (credit_update_asked_) return true;
  const uint32_t unacked = std::min(buf_alloc_, rx_cnt_ - last_fwd_cnt_sent_);
  return fwd_cnt_ != last_fwd_cnt_sent_ && buf_alloc_ - unacked < buf_alloc_ / 4;
}

bool VsockConnection::HasRxWork() const {
  return pending_request_ || pending_response_ ||
         (WantsRead() && (PeerFree() > 0 || !credit_requested_)) ||
         (shutdown_want_ & ~shutdown_sent_) != 0 || NeedsCreditUpdate();
}

VsockHeader VsockConnection::MakeHeader(uint64_t guest_cid, uint16_t op) const {
  VsockHeader h{};
  h.src_cid = kVsockHostCid;
  h.dst_cid = guest_cid;
  h.src_port = local_port_;
  h.dst_port = peer_port_;
  h.type = kVsockTypeStream;
  h.op = op;
  return h;
}

Result<uint32_t> VsockConnection::ReadHost(const DescriptorChain& chain, bool* eof) {
  ChainWriter w(chain);
  RETURN_IF_ERROR(w.Skip(sizeof(VsockHeader)));
  const uint64_t max = std::min<uint64_t>({w.remaining(), PeerFree(), kMaxRwPayload});
  if (max == 0) return 0u;
  iov_.clear();
  w.Iovecs(max, &iov_);
  msghdr m{};
  m.msg_iov = iov_.data();
  m.msg_iovlen = iov_.size();
  ssize_t n;
  do {
    n = ::recvmsg(fd_.get(), &m, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    readable_ = false;
    return 0u;
  }
  if (n < 0) return Status::FromErrno("recv from host");
  if (n == 0) {
    *eof = true;
    readable_ = false;
    return 0u;
  }
  // A short read drained the socket; new bytes raise a new edge. After a
  // hang-up no edge will come, so keep reading until EOF is seen.
  if (static_cast<uint64_t>(n) < max && !host_rdhup_) readable_ = false;
  return static_cast<uint32_t>(n);
}

VsockConnection::RxResult VsockConnection::FillRx(const DescriptorChain& chain,
                                                  uint64_t guest_cid, uint32_t* used_len) {
  std::optional<VsockHeader> h;
  if (pending_request_) {
    pending_request_ = false;
    h = MakeHeader(guest_cid, kVsockOpRequest);
  } else if (pending_response_) {
    pending_response_ = false;
    h = MakeHeader(guest_cid, kVsockOpResponse);
  } else {
    if (WantsRead() && PeerFree() > 0) {
      bool eof = false;
      auto n = ReadHost(chain, &eof);
      if (!n.ok()) return RxResult::kReset;
      if (*n > 0) {
        h = MakeHeader(guest_cid, kVsockOpRw);
        h->len = *n;
        tx_cnt_ += *n;
      } else if (eof) {
        host_eof_ = true;
        shutdown_want_ |= kVsockShutdownSend | (host_hup_ ? kVsockShutdownRcv : 0);
      }
    }
    if (!h && WantsRead() && PeerFree() == 0 && !credit_requested_) {
      credit_requested_ = true;
      h = MakeHeader(guest_cid, kVsockOpCreditRequest);
    } else if (!h && (shutdown_want_ & ~shutdown_sent_)) {
      h = MakeHeader(guest_cid, kVsockOpShutdown);
      h->flags = shutdown_want_;
      shutdown_sent_ = shutdown_want_;
    } else if (!h && NeedsCreditUpdate()) {
      h = MakeHeader(guest_cid, kVsockOpCreditUpdate);
    }
  }
  if (!h) return RxResult::kNothing;
  // Every packet carries our credit, so any of them is a credit update.
  h->buf_alloc = buf_alloc_;
  h->fwd_cnt = fwd_cnt_;
  last_fwd_cnt_sent_ = fwd_cnt_;
  credit_update_asked_ = false;
  ChainWriter w(chain);
  if (!w.WriteObj(*h).ok()) return RxResult::kNothing;  // caller checked the size
  *used_len = static_cast<uint32_t>(sizeof(VsockHeader)) + h->len;
  return RxResult::kFilled;
}

}  // namespace kubicle::vmm::devices::virtio
