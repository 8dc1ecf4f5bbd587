// VsockMuxer, guest-facing half: packets from the TX queue and packets for
// the RX queue. The host-facing half is in vsock_muxer.cc.
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "vmm/devices/virtio/vsock_muxer.h"

namespace kubicle::vmm::devices::virtio {

void VsockMuxer::HandleGuestPacket(const VsockHeader& h, ChainReader& payload) {
  VsockConnection* c = FindByPorts(h.dst_port, h.src_port);
  if (c == nullptr) {
    if (h.op == kVsockOpRequest) {
      GuestConnect(h);
    } else if (h.op != kVsockOpRst) {
      // Like a TCP segment for a closed port: tell the guest to forget it.
      QueueRst(h.src_cid, h.dst_port, h.src_port);
    }
  } else {
    c->OnGuestCredit(h.buf_alloc, h.fwd_cnt);
    OnGuestOp(*c, h, payload);
  }
  RearmTimer();
}

void VsockMuxer::GuestConnect(const VsockHeader& h) {
  if (conns_.size() >= config_.max_connections) {
    LogDrop("connection cap reached", h);
    return QueueRst(h.src_cid, h.dst_port, h.src_port);
  }
  const std::string path = config_.uds_path + "_" + std::to_string(h.dst_port);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return QueueRst(h.src_cid, h.dst_port, h.src_port);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  // A Unix connect never blocks: it succeeds, or fails (EAGAIN when the
  // listener's backlog is full, ENOENT/ECONNREFUSED when nobody listens).
  if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    log::Debug("vsock guest connect refused", {{"path", path}, {"errno", errno}});
    return QueueRst(h.src_cid, h.dst_port, h.src_port);
  }
  const uint64_t id = next_id_++;
  auto c = std::make_unique<VsockConnection>(id, std::move(fd),
                                             VsockConnection::State::kEstablished,
                                             config_.conn_buf_size);
  if (!Watch(c->fd(), id).ok()) return QueueRst(h.src_cid, h.dst_port, h.src_port);
  c->set_ports(h.dst_port, h.src_port);
  c->OnGuestCredit(h.buf_alloc, h.fwd_cnt);
  c->QueueResponse();
  by_ports_[PortKey(h.dst_port, h.src_port)] = id;
  VsockConnection& ref = *c;
  conns_.emplace(id, std::move(c));
  Schedule(ref);
}

void VsockMuxer::OnGuestOp(VsockConnection& c, const VsockHeader& h, ChainReader& payload) {
  using State = VsockConnection::State;
  const uint64_t id = c.id();  // c may be killed (freed) below
  switch (h.op) {
    case kVsockOpRequest:
      LogDrop("OP_REQUEST on an open connection", h);
      return Kill(c, true, "duplicate request");
    case kVsockOpResponse:
      if (c.state() != State::kConnecting) {
        LogDrop("unexpected OP_RESPONSE", h);
        return Kill(c, true, "unexpected response");
      }
      c.set_state(State::kEstablished);
      SetDeadline(c, std::nullopt);
      if (!c.SendToHost("OK " + std::to_string(c.local_port()) + "\n").ok())
        return Kill(c, true, "host peer went away during connect");
      UpdateWriteInterest(c);
      break;
    case kVsockOpRst:
      return Kill(c, false, c.state() == State::kConnecting ? "guest refused" : "guest reset");
    case kVsockOpShutdown:
      OnGuestShutdown(c, h.flags);
      if (Find(id) == nullptr) return;
      break;
    case kVsockOpRw:
      OnGuestRw(c, h, payload);
      if (Find(id) == nullptr) return;
      break;
    case kVsockOpCreditUpdate:
      break;  // the credit fields were taken already
    case kVsockOpCreditRequest:
      c.RequestCreditUpdate();
      break;
    default:
      LogDrop("unknown op", h);
      return;
  }
  Schedule(c);
}

void VsockMuxer::OnGuestRw(VsockConnection& c, const VsockHeader& h, ChainReader& payload) {
  if (c.state() != VsockConnection::State::kEstablished ||
      (c.guest_shutdown() & kVsockShutdownSend)) {
    LogDrop("OP_RW on a connection that is not open for it", h);
    return Kill(c, true, "rw out of state");
  }
  if (!c.AcceptRw(h.len)) {
    LogDrop("guest exceeded its credit", h);
    return Kill(c, true, "credit exceeded");
  }
  iov_.clear();
  payload.Iovecs(h.len, &iov_);
  if (!c.SendToHost(iov_).ok()) return Kill(c, true, "host socket write failed");
  UpdateWriteInterest(c);
}

void VsockMuxer::OnGuestShutdown(VsockConnection& c, uint32_t flags) {
  c.OnGuestShutdown(flags);
  if (c.guest_shutdown() != kVsockShutdownBoth) return;
  if (c.buffered() == 0) return Kill(c, true, "guest closed");
  // Let what the guest sent reach the host first, within close_timeout.
  c.set_state(VsockConnection::State::kClosing);
  SetDeadline(c, config_.close_timeout);
}

bool VsockMuxer::FillRx(const DescriptorChain& chain, uint32_t* used_len) {
  if (!control_.empty()) {
    ChainWriter w(chain);
    if (!w.WriteObj(control_.front()).ok()) return false;
    control_.pop_front();
    *used_len = sizeof(VsockHeader);
    return true;
  }
  bool filled = false;
  while (!filled && !rx_ready_.empty()) {
    const uint64_t id = rx_ready_.front();
    rx_ready_.pop_front();
    in_rx_ready_.erase(id);
    VsockConnection* c = Find(id);
    if (c == nullptr) continue;
    switch (c->FillRx(chain, guest_cid_, used_len)) {
      case VsockConnection::RxResult::kNothing:
        continue;
      case VsockConnection::RxResult::kReset: {
        // Use this very buffer for the RST.
        Kill(*c, true, "host socket read failed");
        return FillRx(chain, used_len);
      }
      case VsockConnection::RxResult::kFilled:
        filled = true;
        // The host is gone and the guest was told: reset if it lingers.
        if (c->host_gone() && !c->deadline()) SetDeadline(*c, config_.close_timeout);
        Schedule(*c);  // round robin: back of the line if it has more
        break;
    }
  }
  RearmTimer();
  return filled;
}

}  // namespace kubicle::vmm::devices::virtio
