// VsockConnection: one stream between a host Unix socket and a guest vsock
// port, with virtio-vsock credit flow control in both directions.
//
// Guest -> host: RW payloads are sent to the host socket straight from guest
// memory (sendmsg on iovecs); what the socket does not take is copied into a
// buffer that can never exceed the buf_alloc we advertise, because a guest
// that sends past its credit is reset (AcceptRw). fwd_cnt counts the bytes
// the host socket took; the guest learns it from every header we send and
// from CREDIT_UPDATEs we volunteer when its view of our free space runs low.
//
// Host -> guest: nothing is buffered at all. Bytes are read from the host
// socket only when the guest has both credit (its buf_alloc - (tx_cnt -
// fwd_cnt)) and an RX buffer, directly into that buffer (recvmsg on iovecs).
// A host peer that floods therefore just fills its own socket buffer.
//
// The socket is registered edge-triggered; readable() remembers that data may
// be waiting until a read comes back short. Not thread-safe: owned by the
// VsockMuxer, under the transport lock.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/queue.h"

namespace kubicle::vmm::devices::virtio {

class VsockConnection {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State {
    kAwaitConnectLine,  // host peer accepted, waiting for "CONNECT <port>\n"
    kConnecting,        // OP_REQUEST queued/sent to the guest, waiting for OP_RESPONSE
    kEstablished,
    kClosing,           // guest shut both ways; flushing what is buffered to the host
  };
  enum class RxResult { kNothing, kFilled, kReset };

  VsockConnection(uint64_t id, UniqueFd fd, State state, uint32_t buf_alloc);

  uint64_t id() const { return id_; }
  int fd() const { return fd_.get(); }
  State state() const { return state_; }
  void set_state(State s) { state_ = s; }
  uint32_t local_port() const { return local_port_; }  // host side
  uint32_t peer_port() const { return peer_port_; }    // guest side
  void set_ports(uint32_t local, uint32_t peer) {
    local_port_ = local;
    peer_port_ = peer;
  }
  std::optional<Clock::time_point> deadline() const { return deadline_; }
  void set_deadline(std::optional<Clock::time_point> d) { deadline_ = d; }

  // Handshake: reads the host's "CONNECT <port>\n" without consuming bytes
  // past the newline. nullopt: incomplete, wait for more. Error: garbage or
  // the peer went away; close the connection.
  Result<std::optional<uint32_t>> ReadConnectLine();

  // --- Guest -> host.
  // Records an incoming RW of len bytes; false if it exceeds our credit.
  bool AcceptRw(uint32_t len);
  // Sends guest bytes (counted in fwd_cnt) or protocol text (not counted).
  Status SendToHost(std::span<const iovec> iov, bool guest_data = true);
  Status SendToHost(std::string_view text);
  // EPOLLOUT: pushes buffered bytes. An error means the host is gone.
  Status FlushToHost();
  size_t buffered() const { return tx_buf_.size() - tx_off_; }
  // Whether EPOLLOUT is in the socket's epoll interest (only while buffered).
  bool watching_writable() const { return watching_writable_; }
  void set_watching_writable(bool on) { watching_writable_ = on; }

  // --- Events from either side.
  void OnHostEvent(uint32_t epoll_events);
  // Credit fields of any packet the guest sent on this connection.
  void OnGuestCredit(uint32_t buf_alloc, uint32_t fwd_cnt);
  // OP_SHUTDOWN from the guest (flags accumulate).
  void OnGuestShutdown(uint32_t flags);
  void RequestCreditUpdate() { credit_update_asked_ = true; }
  void QueueRequest() { pending_request_ = true; }
  void QueueResponse() { pending_response_ = true; }

  uint32_t guest_shutdown() const { return guest_shut_; }
  // Both of the host's directions are finished and the guest was told.
  bool host_gone() const { return host_eof_ && host_hup_ && shutdown_sent_ == kVsockShutdownBoth; }

  // --- Host -> guest.
  bool HasRxWork() const;
  // Writes the next packet for the guest (header, and payload for RW) into
  // chain's writable part; *used_len is what the device reports as used.
  // kReset: the host socket failed; the caller resets the connection.
  RxResult FillRx(const DescriptorChain& chain, uint64_t guest_cid, uint32_t* used_len);

 private:
  uint32_t PeerFree() const;
  bool WantsRead() const;
  bool NeedsCreditUpdate() const;
  // Reads host bytes into the chain after the header. Returns bytes read,
  // 0 at EOF or when nothing is waiting, or an error.
  Result<uint32_t> ReadHost(const DescriptorChain& chain, bool* eof);
  VsockHeader MakeHeader(uint64_t guest_cid, uint16_t op) const;
  void OnBytesSent(size_t n);
  void MaybeShutdownHostWrite();

  uint64_t id_;
  UniqueFd fd_;
  State state_;
  uint32_t local_port_ = 0;
  uint32_t peer_port_ = 0;
  std::optional<Clock::time_point> deadline_;

  // Our receive side (guest -> host).
  const uint32_t buf_alloc_;
  uint32_t rx_cnt_ = 0;             // guest bytes accepted
  uint32_t fwd_cnt_ = 0;            // guest bytes the host socket took
  uint32_t last_fwd_cnt_sent_ = 0;  // fwd_cnt in the last header we sent
  std::vector<uint8_t> tx_buf_;     // accepted, not yet taken by the host socket
  size_t tx_off_ = 0;
  size_t tx_uncounted_ = 0;         // protocol text at the front of tx_buf_
  bool credit_update_asked_ = false;
  bool watching_writable_ = false;

  // The guest's receive side (host -> guest).
  uint32_t peer_buf_alloc_ = 0;
  uint32_t peer_fwd_cnt_ = 0;
  uint32_t tx_cnt_ = 0;  // bytes sent to the guest
  bool credit_requested_ = false;

  bool readable_ = false;  // the host socket may have bytes (edge-triggered)
  bool host_eof_ = false;  // read returned 0
  bool host_rdhup_ = false;  // the host peer will send no more
  bool host_hup_ = false;    // the host peer closed both directions
  bool host_wr_shut_ = false;
  bool pending_request_ = false;
  bool pending_response_ = false;
  uint32_t guest_shut_ = 0;     // OP_SHUTDOWN flags received
  uint32_t shutdown_want_ = 0;  // flags we owe the guest
  uint32_t shutdown_sent_ = 0;
  std::vector<iovec> iov_;  // scratch for recvmsg
};

}  // namespace kubicle::vmm::devices::virtio
