#include "guest/testguest/vsock.h"

#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest {

namespace wire = ::kubicle::guest::protocol;

// virtio/vsock.h holds the header packed and little-endian, as it is on the
// wire, so the bytes are the struct's.
void EncodeVsockHdr(const virtio::VsockHeader& h, uint8_t* out) { Copy(out, &h, sizeof(h)); }

virtio::VsockHeader DecodeVsockHdr(const uint8_t* in) {
  virtio::VsockHeader h;
  Copy(&h, in, sizeof(h));
  return h;
}

void VsockEndpoint::Init(Agent* agent, Session* sessions, uint64_t cid, uint32_t port) {
  agent_ = agent;
  cid_ = cid;
  port_ = port;
  for (uint32_t i = 0; i < kMaxConnections; ++i) {
    conns_[i] = Conn{};
    conns_[i].session = &sessions[i];
  }
  rst_count_ = 0;
}

uint32_t VsockEndpoint::active() const {
  uint32_t n = 0;
  for (const Conn& c : conns_) n += c.used;
  return n;
}

VsockEndpoint::Conn* VsockEndpoint::Find(uint64_t peer_cid, uint32_t peer_port,
                                         uint32_t local_port) {
  if (local_port != port_) return nullptr;
  for (Conn& c : conns_) {
    if (c.used && c.peer_cid == peer_cid && c.peer_port == peer_port) return &c;
  }
  return nullptr;
}

VsockEndpoint::Conn* VsockEndpoint::Accept(const virtio::VsockHeader& h) {
  for (Conn& c : conns_) {
    if (c.used) continue;
    Session* s = c.session;
    c = Conn{};
    c.session = s;
    c.used = true;
    c.peer_cid = h.src_cid;
    c.peer_port = h.src_port;
    c.need_response = true;
    s->Reset(agent_);
    ++accepted_;
    return &c;
  }
  return nullptr;
}

void VsockEndpoint::Free(Conn* c) {
  c->session->Reset(agent_);
  c->used = false;
}

void VsockEndpoint::QueueRst(const virtio::VsockHeader& h) {
  if (rst_count_ == kMaxPendingRst) return;  // the peer times out instead
  rsts_[rst_count_++] = PendingRst{h.src_cid, h.src_port, h.dst_port};
}

void VsockEndpoint::OnTransportReset() {
  for (Conn& c : conns_) {
    if (c.used) Free(&c);
  }
  rst_count_ = 0;
}

void VsockEndpoint::OnPacket(const uint8_t* hdr_bytes, const uint8_t* data, uint32_t data_avail) {
  const virtio::VsockHeader h = DecodeVsockHdr(hdr_bytes);
  if (h.len > data_avail || h.dst_cid != cid_) {
    ++dropped_;  // the device lied about the length, or not for us
    return;
  }
  if (h.type != virtio::kVsockTypeStream) {
    if (h.op != virtio::kVsockOpRst) QueueRst(h);
    return;
  }
  Conn* c = Find(h.src_cid, h.src_port, h.dst_port);
  if (c == nullptr) {
    const bool acceptable =
        h.op == virtio::kVsockOpRequest && h.dst_port == port_ && h.src_cid == wire::kHostCid;
    if (acceptable) c = Accept(h);
    if (c == nullptr) {
      if (h.op != virtio::kVsockOpRst) QueueRst(h);
      return;
    }
  }
  c->peer_buf_alloc = h.buf_alloc;
  c->peer_fwd_cnt = h.fwd_cnt;
  switch (h.op) {
    case virtio::kVsockOpRequest:
      if (!c->need_response) c->need_rst = true;  // a second REQUEST on a live connection
      return;
    case virtio::kVsockOpRw:
      if (c->need_response || c->peer_done || h.len > c->session->RxFree()) {
        c->need_rst = true;  // data before accept, after shutdown, or beyond our credit
        return;
      }
      c->session->Receive(data, h.len);
      return;
    case virtio::kVsockOpCreditUpdate: return;
    case virtio::kVsockOpCreditRequest: c->need_credit_update = true; return;
    case virtio::kVsockOpShutdown:
      if ((h.flags & virtio::kVsockShutdownRcv) != 0) {
        c->need_rst = true;  // the peer reads no more: nothing left to do
      } else if ((h.flags & virtio::kVsockShutdownSend) != 0) {
        c->peer_done = true;  // answer what we have, then close
      }
      return;
    case virtio::kVsockOpRst: Free(c); return;
    default: c->need_rst = true; return;  // RESPONSE (we never connect) or unknown
  }
}

uint32_t VsockEndpoint::PeerCredit(const Conn& c) {
  const uint32_t in_flight = c.tx_cnt - c.peer_fwd_cnt;
  return in_flight >= c.peer_buf_alloc ? 0 : c.peer_buf_alloc - in_flight;
}

virtio::VsockHeader VsockEndpoint::Header(const Conn& c, uint16_t op) const {
  virtio::VsockHeader h{};
  h.src_cid = cid_;
  h.dst_cid = c.peer_cid;
  h.src_port = port_;
  h.dst_port = c.peer_port;
  h.type = virtio::kVsockTypeStream;
  h.op = op;
  h.buf_alloc = Session::kRxCap;
  h.fwd_cnt = c.fwd_cnt;
  return h;
}

bool VsockEndpoint::SendControl(Conn* c, uint16_t op, VsockTx* tx) {
  if (!tx->Send(Header(*c, op), nullptr, 0)) return false;
  c->fwd_cnt_sent = c->fwd_cnt;
  return true;
}

bool VsockEndpoint::PumpConn(Conn* c, VsockTx* tx, bool* sent) {
  if (c->need_rst) {
    if (!SendControl(c, virtio::kVsockOpRst, tx)) return false;
    *sent = true;
    Free(c);
    return true;
  }
  if (c->need_response) {
    if (!SendControl(c, virtio::kVsockOpResponse, tx)) return false;
    *sent = true;
    c->need_response = false;
  }
  Session* s = c->session;
  for (;;) {
    c->fwd_cnt += s->Process(agent_);
    const uint32_t n = Min(Min(s->TxSize(), PeerCredit(*c)), kMaxPacketData);
    if (n == 0) break;
    virtio::VsockHeader h = Header(*c, virtio::kVsockOpRw);
    h.len = n;
    if (!tx->Send(h, s->TxData(), n)) return false;
    *sent = true;
    c->tx_cnt += n;
    c->fwd_cnt_sent = c->fwd_cnt;
    s->TxConsume(n);
  }
  if (c->need_credit_update || c->fwd_cnt != c->fwd_cnt_sent) {
    if (!SendControl(c, virtio::kVsockOpCreditUpdate, tx)) return false;
    *sent = true;
    c->need_credit_update = false;
  }
  const bool drained = s->TxSize() == 0;
  if (drained && (s->close_requested() || (c->peer_done && !s->HasCompleteFrame()))) {
    c->need_rst = true;
    return PumpConn(c, tx, sent);
  }
  return true;
}

bool VsockEndpoint::Pump(VsockTx* tx) {
  bool sent = false;
  while (rst_count_ > 0) {
    const PendingRst& r = rsts_[rst_count_ - 1];
    virtio::VsockHeader h{};
    h.src_cid = cid_;
    h.dst_cid = r.peer_cid;
    h.src_port = r.local_port;
    h.dst_port = r.peer_port;
    h.type = virtio::kVsockTypeStream;
    h.op = virtio::kVsockOpRst;
    if (!tx->Send(h, nullptr, 0)) return sent;
    sent = true;
    --rst_count_;
  }
  for (Conn& c : conns_) {
    if (c.used && !PumpConn(&c, tx, &sent)) break;
  }
  return sent;
}

}  // namespace kubicle::guest::testguest
