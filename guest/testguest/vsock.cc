#include "guest/testguest/vsock.h"

#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest {

namespace wire = ::kubicle::guest::protocol;

void EncodeVsockHdr(const VsockHdr& h, uint8_t* out) {
  wire::StoreLe64(out + 0, h.src_cid);
  wire::StoreLe64(out + 8, h.dst_cid);
  wire::StoreLe32(out + 16, h.src_port);
  wire::StoreLe32(out + 20, h.dst_port);
  wire::StoreLe32(out + 24, h.len);
  wire::StoreLe16(out + 28, h.type);
  wire::StoreLe16(out + 30, h.op);
  wire::StoreLe32(out + 32, h.flags);
  wire::StoreLe32(out + 36, h.buf_alloc);
  wire::StoreLe32(out + 40, h.fwd_cnt);
}

VsockHdr DecodeVsockHdr(const uint8_t* in) {
  VsockHdr h;
  h.src_cid = wire::LoadLe64(in + 0);
  h.dst_cid = wire::LoadLe64(in + 8);
  h.src_port = wire::LoadLe32(in + 16);
  h.dst_port = wire::LoadLe32(in + 20);
  h.len = wire::LoadLe32(in + 24);
  h.type = wire::LoadLe16(in + 28);
  h.op = wire::LoadLe16(in + 30);
  h.flags = wire::LoadLe32(in + 32);
  h.buf_alloc = wire::LoadLe32(in + 36);
  h.fwd_cnt = wire::LoadLe32(in + 40);
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

VsockEndpoint::Conn* VsockEndpoint::Accept(const VsockHdr& h) {
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

void VsockEndpoint::QueueRst(const VsockHdr& h) {
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
  const VsockHdr h = DecodeVsockHdr(hdr_bytes);
  if (h.len > data_avail || h.dst_cid != cid_) {
    ++dropped_;  // the device lied about the length, or not for us
    return;
  }
  if (h.type != kVsockTypeStream) {
    if (h.op != kVsockOpRst) QueueRst(h);
    return;
  }
  Conn* c = Find(h.src_cid, h.src_port, h.dst_port);
  if (c == nullptr) {
    const bool acceptable =
        h.op == kVsockOpRequest && h.dst_port == port_ && h.src_cid == wire::kHostCid;
    if (acceptable) c = Accept(h);
    if (c == nullptr) {
      if (h.op != kVsockOpRst) QueueRst(h);
      return;
    }
  }
  c->peer_buf_alloc = h.buf_alloc;
  c->peer_fwd_cnt = h.fwd_cnt;
  switch (h.op) {
    case kVsockOpRequest:
      if (!c->need_response) c->need_rst = true;  // a second REQUEST on a live connection
      return;
    case kVsockOpRw:
      if (c->need_response || c->peer_done || h.len > c->session->RxFree()) {
        c->need_rst = true;  // data before accept, after shutdown, or beyond our credit
        return;
      }
      c->session->Receive(data, h.len);
      return;
    case kVsockOpCreditUpdate: return;
    case kVsockOpCreditRequest: c->need_credit_update = true; return;
    case kVsockOpShutdown:
      if ((h.flags & kVsockShutdownRcv) != 0) {
        c->need_rst = true;  // the peer reads no more: nothing left to do
      } else if ((h.flags & kVsockShutdownSend) != 0) {
        c->peer_done = true;  // answer what we have, then close
      }
      return;
    case kVsockOpRst: Free(c); return;
    default: c->need_rst = true; return;  // RESPONSE (we never connect) or unknown
  }
}

uint32_t VsockEndpoint::PeerCredit(const Conn& c) {
  const uint32_t in_flight = c.tx_cnt - c.peer_fwd_cnt;
  return in_flight >= c.peer_buf_alloc ? 0 : c.peer_buf_alloc - in_flight;
}

VsockHdr VsockEndpoint::Header(const Conn& c, uint16_t op) const {
  VsockHdr h;
  h.src_cid = cid_;
  h.dst_cid = c.peer_cid;
  h.src_port = port_;
  h.dst_port = c.peer_port;
  h.type = kVsockTypeStream;
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
    if (!SendControl(c, kVsockOpRst, tx)) return false;
    *sent = true;
    Free(c);
    return true;
  }
  if (c->need_response) {
    if (!SendControl(c, kVsockOpResponse, tx)) return false;
    *sent = true;
    c->need_response = false;
  }
  Session* s = c->session;
  for (;;) {
    c->fwd_cnt += s->Process(agent_);
    const uint32_t n = Min(Min(s->TxSize(), PeerCredit(*c)), kMaxPacketData);
    if (n == 0) break;
    VsockHdr h = Header(*c, kVsockOpRw);
    h.len = n;
    if (!tx->Send(h, s->TxData(), n)) return false;
    *sent = true;
    c->tx_cnt += n;
    c->fwd_cnt_sent = c->fwd_cnt;
    s->TxConsume(n);
  }
  if (c->need_credit_update || c->fwd_cnt != c->fwd_cnt_sent) {
    if (!SendControl(c, kVsockOpCreditUpdate, tx)) return false;
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
    VsockHdr h;
    h.src_cid = cid_;
    h.dst_cid = r.peer_cid;
    h.src_port = r.local_port;
    h.dst_port = r.peer_port;
    h.type = kVsockTypeStream;
    h.op = kVsockOpRst;
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
