// VsockEndpoint: the guest side of virtio-vsock stream sockets for the test
// guest, without any hardware access. It listens on one port, accepts
// connections from the host (CID 2), feeds received bytes to one Session per
// connection and sends the replies, following the virtio-vsock credit rules
// (virtio spec 1.2, 5.10.6): we advertise buf_alloc = Session::kRxCap and
// fwd_cnt = bytes the session consumed; we never send more than the peer's
// buf_alloc - (tx_cnt - peer fwd_cnt).
//
// The driver (arch/vsock_device.cc, or a fake in host tests) hands every
// received packet to OnPacket and calls Pump, which sends through VsockTx.
// Everything in a packet is validated (length against the bytes the device
// wrote, CIDs, ports, op, credit): bad packets are dropped or answered with
// RST; nothing a peer sends can overflow a buffer.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "guest/testguest/agent.h"
#include "guest/testguest/session.h"
#include "virtio/vsock.h"

namespace kubicle::guest::testguest {

// The header's bytes (virtio/vsock.h) to and from a struct, wherever the
// device put them.
void EncodeVsockHdr(const virtio::VsockHeader& h, uint8_t* out);
virtio::VsockHeader DecodeVsockHdr(const uint8_t* in);

class VsockTx {
 public:
  // Queues one packet (header + len bytes of data); false when the TX queue
  // has no room, in which case nothing was queued.
  virtual bool Send(const virtio::VsockHeader& hdr, const uint8_t* data, uint32_t len) = 0;

 protected:
  ~VsockTx() = default;
};

class VsockEndpoint {
 public:
  static constexpr uint32_t kMaxConnections = 8;
  static constexpr uint32_t kMaxPacketData = 4096;

  // sessions: kMaxConnections attached sessions.
  void Init(Agent* agent, Session* sessions, uint64_t cid, uint32_t port);
  void SetCid(uint64_t cid) { cid_ = cid; }
  uint64_t cid() const { return cid_; }

  // A packet from the RX queue: its header and the data bytes the device
  // actually wrote (data_avail may exceed hdr.len, never the reverse).
  void OnPacket(const uint8_t* hdr, const uint8_t* data, uint32_t data_avail);
  // VIRTIO_VSOCK_EVENT_TRANSPORT_RESET: drop every connection, keep listening.
  void OnTransportReset();
  // Lets sessions process what they received and sends what credit and TX
  // room allow. Returns true if anything was sent.
  bool Pump(VsockTx* tx);

  uint32_t active() const;
  uint32_t dropped_packets() const { return dropped_; }
  uint32_t accepted() const { return accepted_; }

 private:
  struct Conn {
    bool used;
    uint64_t peer_cid;
    uint32_t peer_port;
    uint32_t peer_buf_alloc;
    uint32_t peer_fwd_cnt;
    uint32_t tx_cnt;        // bytes we sent
    uint32_t fwd_cnt;       // bytes the session consumed
    uint32_t fwd_cnt_sent;  // fwd_cnt as last told to the peer
    bool need_response;
    bool need_credit_update;
    bool need_rst;
    bool peer_done;  // the peer will send no more (SHUTDOWN SEND)
    Session* session;
  };
  struct PendingRst {
    uint64_t peer_cid;
    uint32_t peer_port;
    uint32_t local_port;
  };
  static constexpr uint32_t kMaxPendingRst = 16;

  Conn* Find(uint64_t peer_cid, uint32_t peer_port, uint32_t local_port);
  Conn* Accept(const virtio::VsockHeader& h);
  void Free(Conn* c);
  void QueueRst(const virtio::VsockHeader& h);
  virtio::VsockHeader Header(const Conn& c, uint16_t op) const;
  bool SendControl(Conn* c, uint16_t op, VsockTx* tx);
  // Returns false when the TX queue filled up.
  bool PumpConn(Conn* c, VsockTx* tx, bool* sent);
  static uint32_t PeerCredit(const Conn& c);

  Agent* agent_ = nullptr;
  uint64_t cid_ = 0;
  uint32_t port_ = 0;
  Conn conns_[kMaxConnections] = {};
  PendingRst rsts_[kMaxPendingRst] = {};
  uint32_t rst_count_ = 0;
  uint32_t dropped_ = 0;
  uint32_t accepted_ = 0;
};

}  // namespace kubicle::guest::testguest
