// Fuzzes virtio-vsock: the device's TX packet validation and the muxer's
// connection state machine (vsock.cc, vsock_muxer*.cc, vsock_connection.cc),
// behind a real MmioTransport, with real host peers on Unix sockets.
//
// Input: ops until the end of the input:
//   0 TX packet   u8 mode (bit 0: raw src_cid, 1: raw dst_cid, 2: raw
//                 dst_port, 3: raw type, 4: raw len, 5: one descriptor for
//                 header and payload), the raw fields the mode asks for, u32
//                 src_port, u16 op, u32 flags, u32 buf_alloc, u32 fwd_cnt,
//                 u16 payload size, payload bytes
//   1 RX buffers  u8 count, u16 data size; kicks RX and checks what comes back
//   2 host event  (the muxer's epoll fd fired)
//   3 host peer   connects to the device's Unix socket, sends u8 n bytes
//   4 peer op     u8 peer, u8 n: sends n bytes, or with n = 0 closes
//   5 guest peer  accepts a connection the guest made to port 1234, sends
//                 u8 n bytes (n = 0: closes it)
//   6 transport reset, with an event buffer posted
//   7 device reset and a new probe
//
// Checked: nothing crashes or leaks (ASan); every RX packet the device
// delivers fits the buffer, says who it is from (CID 2 to the guest's CID,
// type STREAM) and has len equal to the payload it carries; no chain is
// answered more often than it was offered, and a TX chain is answered at
// its kick while the device works.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/event_loop.h"
#include "fuzz/common/fuzz_input.h"
#include "fuzz/vmm/virtio_driver.h"
#include "vmm/devices/virtio/vsock.h"

namespace kubicle::fuzz {
namespace {

using virtio::VsockHeader;

constexpr uint64_t kRam = 1 << 20;
constexpr uint64_t kGuestCid = 3;
constexpr uint32_t kGuestPort = 1234;  // the host service the guest may dial
constexpr GuestAddress kRxHeap = 0x10000, kTxHeap = 0x80000;

struct World {
  GuestMemory* mem = nullptr;
  EventLoop* loop = nullptr;
  std::string dir;
  std::string uds;
  int service = -1;  // listens at <uds>_1234
};

int Listen(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  FUZZ_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  FUZZ_CHECK(::listen(fd, 64) == 0);
  return fd;
}

int Connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

World& TheWorld() {
  static World* w = [] {
    auto* w = new World;
    auto m = GuestMemory::CreateAnonymous({{0, kRam}});
    FUZZ_CHECK(m.ok());
    w->mem = m->release();
    auto loop = EventLoop::Create();
    FUZZ_CHECK(loop.ok());
    w->loop = loop->release();
    char tmpl[] = "/tmp/kubicle-vsock-fuzz-XXXXXX";
    FUZZ_CHECK(::mkdtemp(tmpl) != nullptr);
    w->dir = tmpl;
    w->uds = w->dir + "/v.sock";
    w->service = Listen(w->uds + "_" + std::to_string(kGuestPort));
    std::atexit([] {
      World& w = TheWorld();
      ::unlink((w.uds + "_" + std::to_string(kGuestPort)).c_str());
      ::rmdir(w.dir.c_str());
    });
    return w;
  }();
  return *w;
}

struct RxPosted {
  GuestAddress hdr;
  uint32_t data_len;
  GuestAddress data;
};

class Guest {
 public:
  Guest(GuestMemory& mem, virtio::MmioTransport& t) : mem_(mem), drv_(t) { Probe(); }

  void Probe() {
    // A new driver incarnation: its rings start zeroed, as after a reboot.
    std::memset(mem_.HostPointer(0, kRxHeap), 0, kRxHeap);
    rx_ = std::make_unique<DriverQueue>(mem_, 0x0000, 64);
    tx_ = std::make_unique<DriverQueue>(mem_, 0x2000, 64);
    ev_ = std::make_unique<DriverQueue>(mem_, 0x4000, 8);
    posted_.clear();
    next_rx_head_ = 0;
    (void)drv_.Init(kAllFeatures, {rx_.get(), tx_.get(), ev_.get()});
    PostRx(8, 4096);
  }
  void Reset() { drv_.Write32(0x70, 0); }

  void PostRx(unsigned n, uint32_t data_len) {
    for (unsigned i = 0; i < n; ++i) {
      if (rx_heap_ + 64 + data_len > kTxHeap) rx_heap_ = kRxHeap;
      RxPosted p{rx_heap_, data_len, rx_heap_ + 64};
      rx_heap_ += 64 + (data_len + 15) / 16 * 16;
      posted_[next_rx_head_] = p;
      next_rx_head_ = static_cast<uint16_t>((next_rx_head_ + 2) % rx_->size());
      rx_->AddChain({{p.hdr, sizeof(VsockHeader), true}, {p.data, data_len, true}});
    }
    drv_.Notify(0);
    CheckRx();
  }

  void CheckRx() {
    for (const auto& e : rx_->TakeUsed()) {
      auto it = posted_.find(static_cast<uint16_t>(e.id));
      FUZZ_CHECK(it != posted_.end());
      FUZZ_CHECK(rx_->Settle(e.id));  // never more answers than offers
      const RxPosted& p = it->second;
      FUZZ_CHECK(e.len <= sizeof(VsockHeader) + p.data_len);
      if (e.len == 0) continue;
      FUZZ_CHECK(e.len >= sizeof(VsockHeader));
      auto h = mem_.ReadObj<VsockHeader>(p.hdr);
      FUZZ_CHECK(h.ok());
      FUZZ_CHECK(h->src_cid == virtio::kVsockHostCid && h->dst_cid == kGuestCid);
      FUZZ_CHECK(h->type == virtio::kVsockTypeStream);
      FUZZ_CHECK(h->len == e.len - sizeof(VsockHeader));
    }
  }

  void Tx(FuzzInput& in) {
    const uint8_t mode = in.U8();
    VsockHeader h{};
    h.src_cid = (mode & 1) ? in.U64() : kGuestCid;
    h.dst_cid = (mode & 2) ? in.U64() : virtio::kVsockHostCid;
    h.dst_port = (mode & 4) ? in.U32() : kGuestPort;
    h.type = (mode & 8) ? in.U16() : virtio::kVsockTypeStream;
    const uint32_t raw_len = (mode & 16) ? in.U32() : 0;
    h.src_port = in.U32();
    h.op = in.U16();
    h.flags = in.U32();
    h.buf_alloc = in.U32();
    h.fwd_cnt = in.U32();
    auto payload = in.Bytes(in.U16() % 8192);
    h.len = (mode & 16) ? raw_len : static_cast<uint32_t>(payload.size());
    const GuestAddress hdr = kTxHeap;
    const GuestAddress data = (mode & 32) ? hdr + sizeof(h) : kTxHeap + 0x100;
    (void)mem_.WriteObj(hdr, h);
    (void)mem_.Write(data, payload.data(), payload.size());
    if (mode & 32) {
      tx_->AddChain({{hdr, uint32_t(sizeof(h) + payload.size()), false}});
    } else {
      tx_->AddChain({{hdr, sizeof(h), false}, {data, uint32_t(payload.size()), false}});
    }
    drv_.Notify(1);
    // TX is answered at once: exactly this chain, unless it broke the queue.
    const auto used = tx_->TakeUsed();
    for (const auto& e : used) FUZZ_CHECK(tx_->Settle(e.id));
    const uint32_t status = drv_.Read32(0x70);
    if ((status & virtio::kStatusDriverOk) && !(status & virtio::kStatusDeviceNeedsReset))
      FUZZ_CHECK(tx_->outstanding() == 0);
    CheckRx();
  }

  void Event() {
    ev_->AddChain({{0x6000, 4, true}});
    drv_.Notify(2);
  }

 private:
  GuestMemory& mem_;
  MmioDriver drv_;
  std::unique_ptr<DriverQueue> rx_, tx_, ev_;
  std::map<uint16_t, RxPosted> posted_;
  uint16_t next_rx_head_ = 0;
  GuestAddress rx_heap_ = kRxHeap;
};

void Send(int fd, FuzzInput& in, uint8_t n) {
  auto b = in.Bytes(n);
  if (fd >= 0 && !b.empty()) (void)::send(fd, b.data(), b.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  World& w = TheWorld();
  std::memset(w.mem->HostPointer(0, kRam), 0, kRam);
  FuzzInput in(data, size);

  virtio::VsockConfig cfg;
  cfg.guest_cid = kGuestCid;
  cfg.uds_path = w.uds;
  cfg.max_connections = 8;
  cfg.conn_buf_size = 16 * 1024;
  auto v = virtio::Vsock::Create(cfg);
  FUZZ_CHECK(v.ok());
  virtio::Vsock* vsock = v->get();
  auto irq = std::make_shared<NullInterrupt>();
  auto t = virtio::MmioTransport::Create(std::move(*v), *w.mem, irq, w.loop);
  FUZZ_CHECK(t.ok());
  std::vector<int> fds;  // host peers and accepted guest connections
  {
    Guest g(*w.mem, **t);
    std::vector<int> peers, served;
    for (int steps = 0; !in.empty() && steps < 512; ++steps) {
      switch (in.U8() % 8) {
        case 0: g.Tx(in); break;
        case 1: {
          const unsigned n = in.U8() % 16;
          g.PostRx(n, in.U16() % 16384);
          break;
        }
        case 2:
          vsock->HandleHostEvent();
          g.CheckRx();
          break;
        case 3: {
          if (peers.size() >= 4) break;
          int fd = Connect(w.uds);
          if (fd < 0) break;
          peers.push_back(fd);
          fds.push_back(fd);
          Send(fd, in, in.U8());
          break;
        }
        case 4: {
          const uint8_t which = in.U8();
          const uint8_t n = in.U8();
          if (peers.empty()) break;
          int& fd = peers[which % peers.size()];
          if (n == 0 && fd >= 0) {
            ::shutdown(fd, SHUT_RDWR);
          } else {
            Send(fd, in, n);
          }
          break;
        }
        case 5: {
          int fd = ::accept4(w.service, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd >= 0) {
            served.push_back(fd);
            fds.push_back(fd);
          }
          const uint8_t n = in.U8();
          if (served.empty()) break;
          if (n == 0) {
            ::shutdown(served.back(), SHUT_RDWR);
          } else {
            Send(served.back(), in, n);
          }
          break;
        }
        case 6:
          vsock->SendTransportReset();
          g.Event();
          break;
        case 7:
          g.Reset();
          g.Probe();
          break;
      }
    }
  }
  t->reset();
  for (int fd : fds) ::close(fd);
  // Connections the guest made but the fuzzer never accepted.
  for (int fd; (fd = ::accept4(w.service, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) ::close(fd);
  return 0;
}
