#include "vmm/devices/virtio/net.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "snapshot/byte_io.h"
#include "vmm/devices/virtio/chain_io.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/persist.h"

namespace kubicle::vmm::devices::virtio {
namespace {

constexpr uint32_t kTagBackend = 1;
constexpr uint32_t kTagTimer = 2;
constexpr uint16_t kStatusLinkUp = 1;  // VIRTIO_NET_S_LINK_UP

// virtio_net_hdr (spec 5.1.6) as v1 lays it out: num_buffers always there.
struct NetHeader {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
  uint16_t num_buffers;
};
static_assert(sizeof(NetHeader) == Net::kHeaderSize);

Nanos MonotonicNow() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Nanos>(ts.tv_sec) * kNanosPerSecond + static_cast<Nanos>(ts.tv_nsec);
}

}  // namespace

Result<std::unique_ptr<Net>> Net::Create(std::unique_ptr<NetBackend> backend,
                                         const NetConfig& config) {
  if (backend == nullptr) return Status::InvalidArgument("virtio-net needs a backend");
  if (!ValidNicMac(config.mac))
    return Status::InvalidArgument("virtio-net MAC " + FormatMac(config.mac) +
                                   " is multicast or zero");
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return Status::FromErrno("virtio-net epoll_create1");
  UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer.valid()) return Status::FromErrno("virtio-net timerfd_create");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kTagTimer;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, timer.get(), &ev) < 0)
    return Status::FromErrno("virtio-net epoll_ctl timer");
  if (backend->fd() >= 0) {
    ev.events = 0;  // watched from Activate on (WatchBackend)
    ev.data.u32 = kTagBackend;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, backend->fd(), &ev) < 0)
      return Status::FromErrno("virtio-net epoll_ctl backend");
  }
  return std::unique_ptr<Net>(
      new Net(std::move(backend), config, std::move(epoll), std::move(timer)));
}

Net::Net(std::unique_ptr<NetBackend> backend, const NetConfig& config, UniqueFd epoll,
         UniqueFd timer)
    : backend_(std::move(backend)),
      config_(config),
      epoll_(std::move(epoll)),
      timer_(std::move(timer)),
      rx_buf_(kMaxFrameBytes + 1) {
  const Nanos now = Now();
  rx_limit_ = RateLimiter(config_.rx, kMaxFrameBytes, now);
  tx_limit_ = RateLimiter(config_.tx, kMaxFrameBytes, now);
}

Nanos Net::Now() const { return config_.clock ? config_.clock() : MonotonicNow(); }

uint32_t Net::device_id() const { return kDeviceIdNet; }

uint64_t Net::device_features() const {
  return FeatureBit(kFeatureVersion1) | FeatureBit(kFeatureRingEventIdx) |
         FeatureBit(kFeatureNetMac) | FeatureBit(kFeatureNetStatus);
}

Status Net::SetMac(const MacAddress& mac) {
  if (!ValidNicMac(mac))
    return Status::InvalidArgument("MAC " + FormatMac(mac) + " is multicast or zero");
  auto lock = LockTransport();
  config_.mac = mac;
  if (context() != nullptr) context()->SignalConfigChange();
  return Status::Ok();
}

MacAddress Net::mac() const {
  auto lock = LockTransport();
  return config_.mac;
}

NetStats Net::stats() const {
  auto lock = LockTransport();
  return stats_;
}

bool Net::timer_armed() const {
  auto lock = LockTransport();
  return timer_armed_;
}

void Net::ReadConfig(uint64_t offset, std::span<uint8_t> data) {
  uint8_t config[8];
  std::memcpy(config, config_.mac.data(), 6);
  std::memcpy(config + 6, &kStatusLinkUp, 2);
  CopyConfig(config, offset, data);
}

Status Net::Activate() {
  active_ = true;
  WatchBackend();
  return Status::Ok();
}

void Net::Reset() {
  active_ = false;
  rx_pending_ = false;  // a frame on the wire is lost, as with a real NIC reset
  ArmTimer(0);
  WatchBackend();
}

void Net::ProcessQueue(uint16_t index) {
  if (index == kTxQueue) ProcessTx();
  if (index == kRxQueue) ProcessRx();
}

void Net::HandleHostEvent() {
  epoll_event evs[4];
  int n = ::epoll_wait(epoll_.get(), evs, 4, 0);
  bool timer = false;
  for (int i = 0; i < n; ++i) timer |= evs[i].data.u32 == kTagTimer;
  if (timer) {
    uint64_t expirations;
    (void)!::read(timer_.get(), &expirations, sizeof(expirations));
    timer_armed_ = false;
    ProcessTx();
  }
  ProcessRx();
}

void Net::LogDrop(const char* why, uint64_t len) {
  if (!log_limiter_.Allow()) return;
  log::Warn("virtio-net frame dropped",
            {{"why", why}, {"len", len}, {"suppressed", log_limiter_.TakeSuppressed()}});
}

// The TAP is watched only while a frame read now could go somewhere: the
// device is up and no earlier frame is waiting (for a buffer or tokens).
// Level-triggered, so frames left in the TAP wake the loop again.
void Net::WatchBackend() {
  const bool want = active_ && !rx_pending_;
  if (want == watching_ || backend_->fd() < 0) return;
  epoll_event ev{};
  ev.events = want ? uint32_t{EPOLLIN} : 0u;
  ev.data.u32 = kTagBackend;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, backend_->fd(), &ev) == 0) watching_ = want;
}

// wait = 0 disarms. Otherwise the earlier of this and any wake-up already
// set wins: the timer serves both directions and the tx batch bound.
void Net::ArmTimer(Nanos wait) {
  itimerspec its{};
  if (wait != 0 && timer_armed_ && ::timerfd_gettime(timer_.get(), &its) == 0) {
    const Nanos left = static_cast<Nanos>(its.it_value.tv_sec) * kNanosPerSecond +
                       static_cast<Nanos>(its.it_value.tv_nsec);
    if (left != 0 && left <= wait) return;
  }
  its = {};
  its.it_value.tv_sec = static_cast<time_t>(wait / kNanosPerSecond);
  its.it_value.tv_nsec = static_cast<long>(wait % kNanosPerSecond);
  if (::timerfd_settime(timer_.get(), 0, &its, nullptr) == 0) timer_armed_ = wait != 0;
}

void Net::ProcessTx() {
  if (!active_) return;
  Queue& q = context()->queue(kTxQueue);
  const GuestMemory& mem = context()->memory();
  bool any = false;
  for (uint32_t done = 0;; ++done) {
    if (done == kBatch) {
      // The guest may still be adding chains (Linux reclaims used ones
      // without waiting for the interrupt) and, with EVENT_IDX, will not
      // kick again: go on at the next loop turn instead of holding the lock.
      ArmTimer(1);
      break;
    }
    auto popped = q.Pop(mem, &chain_);
    if (!popped.ok() || !*popped) break;  // a broken queue is reported by the transport
    const uint32_t readable = chain_.readable_len;
    const uint32_t frame_len = readable >= kHeaderSize ? readable - kHeaderSize : 0;
    if (readable < kHeaderSize || frame_len == 0) {
      ++stats_.bad_chains;
      ++stats_.tx_dropped;
      LogDrop("tx chain has no frame after the 12-byte header", readable);
    } else if (frame_len > kMaxFrameBytes) {
      ++stats_.oversize;
      ++stats_.tx_dropped;
      LogDrop("tx frame over the maximum", frame_len);
    } else {
      const Nanos now = Now();
      if (!tx_limit_.TryTake(frame_len, now)) {
        q.UndoPop();  // stays on the ring until the tokens are back
        ArmTimer(tx_limit_.WaitFor(frame_len, now));
        break;
      }
      SendChain(chain_, frame_len);
    }
    if (!q.AddUsed(mem, chain_.head, 0).ok()) break;
    any = true;
  }
  if (any) context()->SignalUsed(kTxQueue);
}

void Net::SendChain(const DescriptorChain& chain, uint32_t frame_len) {
  // The header is ignored: with no offloads negotiated it asks for nothing.
  ChainReader reader(chain);
  if (!reader.Skip(kHeaderSize).ok()) return;
  iov_.clear();
  if (reader.Iovecs(frame_len, &iov_) != frame_len) {
    ++stats_.tx_dropped;  // more descriptors than the iovec cap
    return LogDrop("tx frame in too many descriptors", frame_len);
  }
  Status st = backend_->Send(iov_);
  if (!st.ok()) {
    ++stats_.tx_dropped;
    if (log_limiter_.Allow())
      log::Warn("virtio-net backend send failed", {{"error", st.ToString()}});
    return;
  }
  ++stats_.tx_frames;
  stats_.tx_bytes += frame_len;
}

bool Net::FetchRxFrame() {
  for (uint32_t tries = 0; tries < kBatch; ++tries) {
    auto got = backend_->Receive(rx_buf_);
    if (!got.ok()) {
      ++stats_.rx_dropped;
      if (log_limiter_.Allow())
        log::Warn("virtio-net backend receive failed", {{"error", got.status().ToString()}});
      return false;
    }
    if (*got == 0) return false;
    if (*got > kMaxFrameBytes) {
      ++stats_.oversize;
      ++stats_.rx_dropped;
      LogDrop("rx frame over the maximum", *got);
      continue;
    }
    rx_len_ = static_cast<uint32_t>(*got);
    rx_pending_ = true;
    return true;
  }
  return false;
}

void Net::ProcessRx() {
  if (!active_) return;
  Queue& q = context()->queue(kRxQueue);
  const GuestMemory& mem = context()->memory();
  const uint32_t pop_bound = kDrainRingsBound * uint32_t{q.state().size};
  bool any = false;
  uint32_t delivered = 0, pops = 0;
  while (delivered < kBatch) {
    if (!rx_pending_ && !FetchRxFrame()) break;
    const Nanos now = Now();
    if (Nanos wait = rx_limit_.WaitFor(rx_len_, now); wait != 0) {
      ArmTimer(wait);
      break;
    }
    auto popped = q.Pop(mem, &chain_);
    if (!popped.ok() || !*popped) break;  // no buffer: wait for the guest's rx kick
    if (++pops > pop_bound) {
      q.UndoPop();  // not taken, so every chain taken is answered once
      (void)q.Break(Status::ResourceExhausted("rx buffers keep coming: the ring feeds itself"));
      break;
    }
    if (chain_.writable_len < kHeaderSize) {
      ++stats_.bad_chains;  // can never hold a frame: hand it back empty
      if (!q.AddUsed(mem, chain_.head, 0).ok()) break;
      any = true;
      continue;
    }
    if (chain_.writable_len - kHeaderSize < rx_len_) {
      q.UndoPop();  // keep the buffer for a frame that fits
      ++stats_.rx_dropped;
      rx_pending_ = false;
      LogDrop("rx frame larger than the guest's buffer", rx_len_);
      continue;
    }
    (void)rx_limit_.TryTake(rx_len_, now);
    const NetHeader header{.num_buffers = 1};  // the spec's value without MRG_RXBUF
    ChainWriter writer(chain_);
    uint32_t used = 0;
    if (writer.WriteObj(header).ok() && writer.Write(rx_buf_.data(), rx_len_).ok())
      used = kHeaderSize + rx_len_;
    rx_pending_ = false;
    ++stats_.rx_frames;
    stats_.rx_bytes += rx_len_;
    ++delivered;
    if (!q.AddUsed(mem, chain_.head, used).ok()) break;
    any = true;
  }
  if (any) context()->SignalUsed(kRxQueue);
  WatchBackend();
}

// ---- persist ----

Result<std::vector<uint8_t>> Net::SaveState() const {
  std::vector<uint8_t> out;
  snapshot::ByteWriter w(out);
  w.Raw(config_.mac.data(), config_.mac.size());
  for (const RateLimit* l : {&config_.rx, &config_.tx}) {
    w.U64(l->bytes_per_sec);
    w.U64(l->packets_per_sec);
  }
  return out;
}

Result<Net::SavedState> Net::DecodeState(std::span<const uint8_t> bytes, bool newer_minor) {
  snapshot::ByteReader r(bytes, "virtio-net state");
  SavedState s;
  r.Raw(s.mac.data(), s.mac.size(), "net mac");
  for (RateLimit* l : {&s.rx, &s.tx}) {
    r.U64(&l->bytes_per_sec, "net bytes per second");
    r.U64(&l->packets_per_sec, "net packets per second");
  }
  r.End(newer_minor);
  if (!r.ok()) return r.status();
  if (!ValidNicMac(s.mac)) return Status::DataLoss("virtio-net state: MAC is multicast or zero");
  return s;
}

Status Net::CheckSaved(std::span<const uint8_t> bytes, bool newer_minor) {
  return DecodeState(bytes, newer_minor).status();
}

Result<std::unique_ptr<VirtioDevice>> Net::Restore(std::span<const uint8_t> bytes,
                                                   bool newer_minor,
                                                   const DeviceResources& host) {
  ASSIGN_OR_RETURN(SavedState saved, DecodeState(bytes, newer_minor));
  if (!host.open_net)
    return Status::InvalidArgument("the snapshot has a net device: --net is required");
  ASSIGN_OR_RETURN(std::unique_ptr<NetBackend> backend, host.open_net());
  NetConfig config;
  // A clone gets the MAC and limits it is given now; the saved ones when none are.
  config.mac = host.net_mac.value_or(saved.mac);
  config.rx = host.net_rx.value_or(saved.rx);
  config.tx = host.net_tx.value_or(saved.tx);
  ASSIGN_OR_RETURN(std::unique_ptr<Net> net, Create(std::move(backend), config));
  return std::unique_ptr<VirtioDevice>(std::move(net));
}

void Net::OnRestored() {
  // The restored transport carries the template's config generation: bump
  // it with the (maybe new) MAC and raise a config change, on which a driver
  // that negotiated NET_F_STATUS re-reads the link status.
  (void)SetMac(mac());
}

}  // namespace kubicle::vmm::devices::virtio
