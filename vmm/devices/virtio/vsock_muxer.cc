#include "vmm/devices/virtio/vsock_muxer.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/log.h"

namespace kubicle::vmm::devices::virtio {
namespace {

Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return Status::InvalidArgument("unix socket path empty or too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

Result<std::unique_ptr<VsockMuxer>> VsockMuxer::Create(const VsockConfig& config) {
  if (config.conn_buf_size == 0 || config.max_connections == 0)
    return Status::InvalidArgument("vsock buffer size and connection cap must be positive");
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(config.uds_path));
  std::unique_ptr<VsockMuxer> m(new VsockMuxer(config));
  m->epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!m->epoll_) return Status::FromErrno("vsock epoll_create1");
  m->timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!m->timer_) return Status::FromErrno("vsock timerfd_create");
  RETURN_IF_ERROR(m->Watch(m->timer_.get(), kTimerTag));
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener) return Status::FromErrno("vsock socket");
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0)
    return Status::FromErrno("bind vsock socket " + config.uds_path);
  m->listener_ = std::move(listener);  // from here on the destructor unlinks the path
  if (::listen(m->listener_.get(), 128) < 0) return Status::FromErrno("listen on " + config.uds_path);
  return m;
}

VsockMuxer::~VsockMuxer() {
  DropAll();
  if (listener_ && ::getpid() == owner_pid_) ::unlink(config_.uds_path.c_str());
}

Status VsockMuxer::Watch(int fd, uint64_t tag) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  if (tag >= kFirstConnectionTag) ev.events |= EPOLLRDHUP;
  ev.data.u64 = tag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) return Status::FromErrno("epoll_ctl add");
  return Status::Ok();
}

void VsockMuxer::UpdateWriteInterest(VsockConnection& c) {
  const bool want = c.buffered() > 0;
  if (want == c.watching_writable()) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET | (want ? uint32_t{EPOLLOUT} : 0u);
  ev.data.u64 = c.id();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd(), &ev) == 0) c.set_watching_writable(want);
}

Status VsockMuxer::Start() {
  if (listening_) return Status::Ok();
  RETURN_IF_ERROR(Watch(listener_.get(), kListenerTag));
  listening_ = true;
  return Status::Ok();
}

void VsockMuxer::Stop() {
  DropAll();
  if (listening_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
  listening_ = false;
}

void VsockMuxer::DropAll() {
  for (auto& [id, c] : conns_) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->fd(), nullptr);
  conns_.clear();  // closes every host socket
  by_ports_.clear();
  host_ports_.clear();
  rx_ready_.clear();
  in_rx_ready_.clear();
  control_.clear();
  timer_dirty_ = true;
  RearmTimer();
}

void VsockMuxer::LogDrop(const char* why, const VsockHeader& h) {
  if (!log_limiter_.Allow()) return;
  log::Warn("vsock packet dropped", {{"why", why},
                                     {"op", h.op},
                                     {"src_port", h.src_port},
                                     {"dst_port", h.dst_port},
                                     {"len", h.len},
                                     {"suppressed", log_limiter_.TakeSuppressed()}});
}

VsockConnection* VsockMuxer::Find(uint64_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second.get();
}

VsockConnection* VsockMuxer::FindByPorts(uint32_t local, uint32_t peer) {
  auto it = by_ports_.find(PortKey(local, peer));
  return it == by_ports_.end() ? nullptr : Find(it->second);
}

void VsockMuxer::Schedule(VsockConnection& c) {
  if (c.HasRxWork() && in_rx_ready_.insert(c.id()).second) rx_ready_.push_back(c.id());
}

void VsockMuxer::QueueRst(uint64_t guest_cid, uint32_t src_port, uint32_t dst_port) {
  if (control_.size() >= kMaxControl) {
    if (log_limiter_.Allow()) log::Warn("vsock RST queue full; dropping RST", {});
    return;
  }
  VsockHeader h{};
  h.src_cid = kVsockHostCid;
  h.dst_cid = guest_cid;
  h.src_port = src_port;
  h.dst_port = dst_port;
  h.type = kVsockTypeStream;
  h.op = kVsockOpRst;
  control_.push_back(h);
}

void VsockMuxer::Kill(VsockConnection& c, bool rst, const char* why) {
  log::Debug("vsock connection closed", {{"why", why},
                                         {"host_port", c.local_port()},
                                         {"guest_port", c.peer_port()},
                                         {"rst", rst ? 1 : 0}});
  const bool has_ports = c.state() != VsockConnection::State::kAwaitConnectLine;
  if (rst && has_ports) QueueRst(guest_cid_, c.local_port(), c.peer_port());
  if (has_ports) by_ports_.erase(PortKey(c.local_port(), c.peer_port()));
  host_ports_.erase(c.local_port());
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd(), nullptr);
  if (c.deadline()) timer_dirty_ = true;
  conns_.erase(c.id());  // c is gone; rx_ready_ skips the stale id
}

void VsockMuxer::SetDeadline(VsockConnection& c, std::optional<std::chrono::milliseconds> in) {
  c.set_deadline(in ? std::optional(Clock::now() + *in) : std::nullopt);
  timer_dirty_ = true;
}

void VsockMuxer::RearmTimer() {
  if (!timer_dirty_) return;
  timer_dirty_ = false;
  std::optional<Clock::time_point> next;
  for (auto& [id, c] : conns_)
    if (c->deadline() && (!next || *c->deadline() < *next)) next = c->deadline();
  if (next == armed_) return;
  armed_ = next;
  itimerspec its{};
  if (next) {
    // steady_clock is CLOCK_MONOTONIC on Linux. A zero value disarms, so
    // an already-passed deadline becomes 1 ns.
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(next->time_since_epoch()).count();
    if (ns <= 0) ns = 1;
    its.it_value.tv_sec = ns / 1'000'000'000;
    its.it_value.tv_nsec = ns % 1'000'000'000;
  }
  if (::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &its, nullptr) < 0)
    log::Error("vsock timerfd_settime failed", {{"errno", errno}});
}

void VsockMuxer::HandleEvents() {
  epoll_event events[64];
  int n;
  do {
    n = ::epoll_wait(epoll_.get(), events, 64, 0);
  } while (n < 0 && errno == EINTR);
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = events[i].data.u64;
    if (tag == kListenerTag) {
      Accept();
    } else if (tag == kTimerTag) {
      OnTimer();
    } else if (VsockConnection* c = Find(tag)) {
      OnConnectionEvent(*c, events[i].events);
    }
  }
  RearmTimer();
}

void VsockMuxer::Accept() {
  while (true) {
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        log::Error("vsock accept failed", {{"errno", errno}});
      return;
    }
    if (conns_.size() >= config_.max_connections) {
      if (log_limiter_.Allow())
        log::Warn("vsock connection cap reached; refusing host peer",
                  {{"max", config_.max_connections}});
      continue;  // fd closes here
    }
    const uint64_t id = next_id_++;
    auto c = std::make_unique<VsockConnection>(id, std::move(fd),
                                               VsockConnection::State::kAwaitConnectLine,
                                               config_.conn_buf_size);
    if (!Watch(c->fd(), id).ok()) continue;
    SetDeadline(*c, config_.handshake_timeout);
    conns_.emplace(id, std::move(c));
  }
}

void VsockMuxer::OnConnectionEvent(VsockConnection& c, uint32_t events) {
  if (c.state() == VsockConnection::State::kAwaitConnectLine) {
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) OnConnectLine(c);
    return;
  }
  c.OnHostEvent(events);
  if ((events & EPOLLOUT) && c.buffered() > 0) {
    if (!c.FlushToHost().ok()) return Kill(c, true, "host socket write failed");
    UpdateWriteInterest(c);
  }
  if (c.state() == VsockConnection::State::kClosing && c.buffered() == 0)
    return Kill(c, true, "drained after guest shutdown");
  Schedule(c);
}

void VsockMuxer::OnConnectLine(VsockConnection& c) {
  auto port = c.ReadConnectLine();
  if (!port.ok()) {
    if (log_limiter_.Allow())
      log::Warn("vsock host handshake failed", {{"error", port.status().ToString()}});
    return Kill(c, false, "bad handshake");
  }
  if (!port->has_value()) return;  // incomplete line
  const uint32_t host_port = AllocateHostPort();
  c.set_ports(host_port, **port);
  c.set_state(VsockConnection::State::kConnecting);
  c.QueueRequest();
  host_ports_.insert(host_port);
  by_ports_[PortKey(host_port, **port)] = c.id();
  SetDeadline(c, config_.connect_timeout);
  Schedule(c);
}

uint32_t VsockMuxer::AllocateHostPort() {
  // At most max_connections ports are taken, so this terminates quickly.
  while (true) {
    uint32_t p = next_host_port_++;
    if (next_host_port_ == 0) next_host_port_ = kFirstHostPort;
    if (!host_ports_.count(p)) return p;
  }
}

void VsockMuxer::OnTimer() {
  uint64_t expirations;
  (void)!::read(timer_.get(), &expirations, sizeof(expirations));
  armed_.reset();
  timer_dirty_ = true;
  const auto now = Clock::now();
  std::vector<uint64_t> due;
  for (auto& [id, c] : conns_)
    if (c->deadline() && *c->deadline() <= now) due.push_back(id);
  for (uint64_t id : due) {
    VsockConnection* c = Find(id);
    switch (c->state()) {
      case VsockConnection::State::kAwaitConnectLine:
        Kill(*c, false, "no CONNECT line in time");
        break;
      case VsockConnection::State::kConnecting:
        Kill(*c, true, "guest did not answer OP_REQUEST in time");
        break;
      default:
        Kill(*c, true, "close timed out");
        break;
    }
  }
}

}  // namespace kubicle::vmm::devices::virtio
