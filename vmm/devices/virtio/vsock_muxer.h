// VsockMuxer: the host side of virtio-vsock, Firecracker-compatible.
//
// Host-initiated: a host process connects to the Unix socket `uds_path` and
// writes "CONNECT <port>\n"; the muxer allocates a host port (from 2^30 up),
// sends OP_REQUEST from CID 2 to the guest, and on OP_RESPONSE writes
// "OK <hostport>\n" back and relays bytes both ways. A peer that sends no
// CONNECT line in time, or garbage, is closed; if the guest refuses (RST) or
// does not answer in time, the host socket is closed (and the guest reset).
// Guest-initiated: an OP_REQUEST to host port P connects to `<uds_path>_P`;
// RST if nothing listens there.
//
// All host fds (the listener, every connection, one timerfd for deadlines)
// live in the muxer's own epoll fd, registered edge-triggered; the device
// exposes that one fd to the VMM's event loop. Nothing here blocks.
//
// Bounds: at most max_connections streams (handshakes included); at most
// buf_alloc buffered bytes per stream towards the host; nothing buffered
// towards the guest; a bounded queue of connection-less RST replies.
// Not thread-safe: owned by Vsock, under the transport lock.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "vmm/devices/virtio/chain_io.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/log_limiter.h"
#include "vmm/devices/virtio/vsock_connection.h"

namespace kubicle::vmm::devices::virtio {

struct VsockConfig {
  uint64_t guest_cid = 3;
  // The host-side listening socket; must not exist yet. Removed on destruction.
  std::string uds_path;
  uint32_t max_connections = 256;
  // buf_alloc advertised per stream: the most guest->host bytes buffered.
  uint32_t conn_buf_size = 256 * 1024;
  // A host peer must send its CONNECT line within this time.
  std::chrono::milliseconds handshake_timeout{2000};
  // The guest must answer OP_REQUEST within this time.
  std::chrono::milliseconds connect_timeout{2000};
  // After both sides are done, how long to wait for buffered bytes to drain
  // to the host (or for the guest to close) before resetting.
  std::chrono::milliseconds close_timeout{2000};
};

class VsockMuxer {
 public:
  using Clock = std::chrono::steady_clock;

  // Binds and listens on config.uds_path (not yet watched until Start).
  static Result<std::unique_ptr<VsockMuxer>> Create(const VsockConfig& config);
  // Closes every socket and removes uds_path, but only in the process that
  // created it: a fork(2) child destroying its inherited copy must not
  // delete the parent's socket. (A child must not *use* an inherited muxer:
  // its epoll instance is shared with the parent.)
  ~VsockMuxer();

  int epoll_fd() const { return epoll_.get(); }
  uint64_t guest_cid() const { return guest_cid_; }
  void set_guest_cid(uint64_t cid) { guest_cid_ = cid; }
  size_t connection_count() const { return conns_.size(); }

  // Device activated: start accepting host connections.
  Status Start();
  // Device reset: drop every connection and stop accepting (the listening
  // socket stays bound; connections wait in its backlog).
  void Stop();
  // Transport reset: drop every connection (no RST: the guest drops its own).
  void DropAll();

  // The epoll fd is readable: accept, handshake, relay, fire deadlines.
  void HandleEvents();
  // One validated packet from the guest's TX queue (cids, type and length
  // already checked); payload is positioned after the header.
  void HandleGuestPacket(const VsockHeader& h, ChainReader& payload);

  // True when something may be waiting to go to the guest.
  bool HasRxWork() const { return !control_.empty() || !rx_ready_.empty(); }
  // Writes the next packet for the guest into chain (writable part of at
  // least sizeof(VsockHeader) bytes). False: nothing to send after all.
  bool FillRx(const DescriptorChain& chain, uint32_t* used_len);

 private:
  explicit VsockMuxer(const VsockConfig& config)
      : config_(config), owner_pid_(::getpid()), guest_cid_(config.guest_cid) {}

  void Accept();
  void OnConnectionEvent(VsockConnection& c, uint32_t events);
  void OnConnectLine(VsockConnection& c);
  void OnTimer();
  void GuestConnect(const VsockHeader& h);
  void OnGuestOp(VsockConnection& c, const VsockHeader& h, ChainReader& payload);
  void OnGuestRw(VsockConnection& c, const VsockHeader& h, ChainReader& payload);
  void OnGuestShutdown(VsockConnection& c, uint32_t flags);

  static uint64_t PortKey(uint32_t local, uint32_t peer) { return uint64_t{local} << 32 | peer; }
  Status Watch(int fd, uint64_t tag);
  // EPOLLOUT is watched only while bytes wait for the host: a Unix socket
  // signals write space on every read by its peer, which would otherwise
  // wake the device thread once per host read.
  void UpdateWriteInterest(VsockConnection& c);
  VsockConnection* Find(uint64_t id);
  VsockConnection* FindByPorts(uint32_t local, uint32_t peer);
  uint32_t AllocateHostPort();
  void Schedule(VsockConnection& c);
  // Closes the host side; with rst, tells the guest too.
  void Kill(VsockConnection& c, bool rst, const char* why);
  void QueueRst(uint64_t guest_cid, uint32_t src_port, uint32_t dst_port);
  void SetDeadline(VsockConnection& c, std::optional<std::chrono::milliseconds> in);
  void RearmTimer();
  void LogDrop(const char* why, const VsockHeader& h);

  const VsockConfig config_;
  const pid_t owner_pid_;
  uint64_t guest_cid_;
  UniqueFd epoll_;
  UniqueFd listener_;
  UniqueFd timer_;
  bool listening_ = false;

  uint64_t next_id_ = kFirstConnectionTag;
  uint32_t next_host_port_ = kFirstHostPort;
  std::unordered_map<uint64_t, std::unique_ptr<VsockConnection>> conns_;
  std::unordered_map<uint64_t, uint64_t> by_ports_;  // local << 32 | peer -> id
  std::unordered_set<uint32_t> host_ports_;           // allocated for host-initiated streams
  std::deque<uint64_t> rx_ready_;                     // ids with packets for the guest
  std::unordered_set<uint64_t> in_rx_ready_;
  std::deque<VsockHeader> control_;  // RSTs that belong to no connection
  std::vector<iovec> iov_;           // scratch for guest payloads
  bool timer_dirty_ = false;
  std::optional<Clock::time_point> armed_;
  LogLimiter log_limiter_;

  static constexpr uint64_t kListenerTag = 0;
  static constexpr uint64_t kTimerTag = 1;
  static constexpr uint64_t kFirstConnectionTag = 2;
  static constexpr uint32_t kFirstHostPort = 1u << 30;
  static constexpr size_t kMaxControl = 512;
};

}  // namespace kubicle::vmm::devices::virtio
