// Fuzzes virtio-net: a Net device behind a real MmioTransport on an event
// loop, probed like Linux does, then driven by a fuzzed sequence of guest
// and host actions: tx and rx chains (layout, directions, stray addresses,
// readable bytes), kicks, frames arriving from the backend (up to past the
// maximum), backend send failures, rate limits on a fuzzed clock, loop turns
// (the limiter's timer), SetMac and device reset.
//
// Input: u8 flags (bit 0: no EVENT_IDX, bit 1: sends fail, bit 2: tx
// limited, bit 3: rx limited; the limits' rates are u16 each), then ops,
// each a u8 (% 7): 0 tx chain, 1 rx chain (a chain: u8 buffer count (% 8),
// per buffer u16 length, u8 flags (bit 0: device-writable, bit 1: a raw u64
// guest address follows) and, for readable buffers, their bytes), 2 kick
// (u8: bit 0 rx, bit 1 tx), 3 backend frame (u16 length, at least 1; u8:
// bit 0 adds 65536), 4 clock += u16 ms, 5 a loop turn, 6 SetMac(u8) or reset (u8 bit 7).
//
// Checked: the backend only sees frames of 1..kMaxFrameBytes that are, in
// order, the payloads (past the 12-byte header) of well-formed tx chains;
// every used length fits its chain's writable bytes and is 0 or at least a
// header; a filled rx buffer holds a zero header with num_buffers = 1 and
// the next backend frame that fit; a chain is answered at most as often as
// it was offered. Checks of what the driver reads back skip what stray rx
// writes (raw addresses) may have overwritten, the rings included (see
// StrayWrites in virtio_driver.h).
#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "common/event_loop.h"
#include "fuzz/common/fuzz_input.h"
#include "fuzz/vmm/virtio_driver.h"
#include "vmm/devices/virtio/net.h"

namespace kubicle::fuzz {
namespace {

using virtio::Net;
using Frame = std::vector<uint8_t>;

constexpr uint64_t kRam = 1 << 20;  // cleared per input: larger costs exec/s
constexpr GuestAddress kRxBase = 0;
constexpr GuestAddress kTxBase = 0x4000;
constexpr GuestAddress kHeapBase = 0x8000;

struct Wire {
  std::deque<Frame> to_guest;    // not yet read by the device
  std::vector<Frame> from_guest;
  bool fail_sends = false;
};

class FakeBackend final : public virtio::NetBackend {
 public:
  explicit FakeBackend(Wire* wire) : wire_(wire) {}
  int fd() const override { return -1; }  // read on kicks and timer turns
  Status Send(std::span<const iovec> frame) override {
    if (wire_->fail_sends) return Status::Unavailable("injected");
    Frame f;
    for (const iovec& v : frame) {
      auto* p = static_cast<const uint8_t*>(v.iov_base);
      f.insert(f.end(), p, p + v.iov_len);
    }
    wire_->from_guest.push_back(std::move(f));
    return Status::Ok();
  }
  Result<size_t> Receive(std::span<uint8_t> buf) override {
    if (wire_->to_guest.empty()) return size_t{0};
    Frame f = std::move(wire_->to_guest.front());
    wire_->to_guest.pop_front();
    const size_t n = std::min(f.size(), buf.size());
    std::copy_n(f.begin(), n, buf.begin());
    return n;
  }

 private:
  Wire* wire_;
};

Frame MakeFrame(size_t len, uint32_t seq) {
  Frame f(len);
  for (size_t i = 0; i < len; ++i) f[i] = static_cast<uint8_t>(seq * 31 + i);
  return f;
}

GuestMemory& Memory() {
  static GuestMemory* mem = [] {
    auto m = GuestMemory::CreateAnonymous({{0, kRam}});
    FUZZ_CHECK(m.ok());
    return m->release();
  }();
  return *mem;
}

EventLoop& Loop() {
  static EventLoop* loop = [] {
    auto l = EventLoop::Create();
    FUZZ_CHECK(l.ok());
    return l->release();
  }();
  return *loop;
}

struct Posted {
  std::vector<Buf> bufs;
  uint32_t writable = 0;
  bool sane = true;   // every buffer laid out by the fuzzer inside RAM
  Frame readable;     // the bytes of the readable part (sane chains)
};

// One driver queue's bookkeeping: chains by head, heads answered.
struct QueueBook {
  std::map<uint16_t, Posted> by_head;
  StrayWrites* stray = nullptr;  // where raw device-writable buffers point
  uint16_t next_head = 0;
  size_t descs = 0;
};

void PostChain(FuzzInput& in, GuestMemory& mem, GuestHeap& heap, DriverQueue& q,
               QueueBook& book) {
  Posted pc;
  const uint8_t nbufs = in.U8() % 8;
  for (uint8_t b = 0; b < nbufs; ++b) {
    const uint16_t len = in.U16();
    const uint8_t bf = in.U8();
    Buf buf{0, len, (bf & 1) != 0};
    if (bf & 2) {
      buf.addr = in.U64();
      pc.sane = false;
    } else {
      buf.addr = heap.Alloc(len);
      if (buf.addr == 0) return;
      if (!buf.writable) {
        auto bytes = in.Bytes(len);
        (void)mem.Write(buf.addr, bytes.data(), bytes.size());
        Frame all(len, 0);
        std::copy(bytes.begin(), bytes.end(), all.begin());
        pc.readable.insert(pc.readable.end(), all.begin(), all.end());
      }
    }
    if (buf.writable) pc.writable += buf.len;
    pc.bufs.push_back(buf);
  }
  // At most one lap of the descriptor table, so heads stay unique.
  if (pc.bufs.empty() || book.descs + pc.bufs.size() > Net::kQueueSize) return;
  book.descs += pc.bufs.size();
  if (!pc.sane)
    for (const Buf& b : pc.bufs) book.stray->Add(b);
  q.AddChain(pc.bufs);
  book.by_head[book.next_head] = pc;
  book.next_head = static_cast<uint16_t>((book.next_head + pc.bufs.size()) % Net::kQueueSize);
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  GuestMemory& mem = Memory();
  std::memset(mem.HostPointer(0, kRam), 0, kRam);
  FuzzInput in(data, size);

  const uint8_t flags = in.U8();
  Wire wire;
  wire.fail_sends = flags & 2;
  virtio::Nanos now = 1'000'000'000;
  virtio::NetConfig config;
  config.mac = {0x02, 0x4b, 0x42, 0, 0, 1};
  config.clock = [&now] { return now; };
  if (flags & 4) config.tx = {.bytes_per_sec = in.U16(), .packets_per_sec = in.U16()};
  if (flags & 8) config.rx = {.bytes_per_sec = in.U16(), .packets_per_sec = in.U16()};
  auto net = Net::Create(std::make_unique<FakeBackend>(&wire), config);
  FUZZ_CHECK(net.ok());
  Net* dev = net->get();
  auto irq = std::make_shared<NullInterrupt>();
  auto t = virtio::MmioTransport::Create(std::move(*net), mem, irq, &Loop());
  FUZZ_CHECK(t.ok());
  MmioDriver drv(**t);
  DriverQueue rxq(mem, kRxBase, Net::kQueueSize), txq(mem, kTxBase, Net::kQueueSize);
  uint64_t wanted = kAllFeatures;
  if (flags & 1) wanted &= ~virtio::FeatureBit(virtio::kFeatureRingEventIdx);
  FUZZ_CHECK(drv.Init(wanted, {&rxq, &txq}));

  GuestHeap heap(kHeapBase, kRam);
  StrayWrites stray;
  QueueBook rx_book, tx_book;
  rx_book.stray = tx_book.stray = &stray;
  std::vector<Frame> pushed;
  bool was_reset = false;
  for (int ops = 0; !in.empty() && ops < 64; ++ops) {
    switch (in.U8() % 7) {
      case 0: PostChain(in, mem, heap, txq, tx_book); break;
      case 1: PostChain(in, mem, heap, rxq, rx_book); break;
      case 2: {
        const uint8_t k = in.U8();
        if (k & 1) drv.Notify(Net::kRxQueue);
        if (k & 2) drv.Notify(Net::kTxQueue);
        break;
      }
      case 3: {
        size_t len = in.U16();
        if (in.U8() & 1) len += 65536;
        len = std::max<size_t>(len, 1);  // a read of 0 is "no frame" (net_backend.h)
        pushed.push_back(MakeFrame(len, static_cast<uint32_t>(pushed.size())));
        wire.to_guest.push_back(pushed.back());
        break;
      }
      case 4: now += uint64_t{in.U16()} * 1'000'000; break;
      case 5: (void)Loop().RunOnce(0); break;
      case 6: {
        const uint8_t m = in.U8();
        if (m & 0x80) {
          drv.Write32(0x70, 0);  // reset: the device drops its held frame
          was_reset = true;
        } else {
          (void)dev->SetMac({0x02, 0, 0, 0, 0, m});
        }
        break;
      }
    }
  }

  // Stray rx writes over either queue's rings: the heads the driver reads
  // back are not the device's answers (virtio_blk_fuzzer.cc says why).
  const bool rings_clobbered = stray.Overlaps(kRxBase, kHeapBase - kRxBase);
  auto clobbered = [&stray](const Posted& pc) {
    for (const Buf& b : pc.bufs)
      if (stray.Overlaps(b.addr, b.len)) return true;
    return false;
  };

  // tx: every frame sent is, in ring order, a well-formed chain's payload.
  size_t next = 0;
  std::vector<const Posted*> tx_order;
  for (const auto& [head, pc] : tx_book.by_head) tx_order.push_back(&pc);
  for (const auto& e : txq.TakeUsed()) {
    if (rings_clobbered) continue;
    FUZZ_CHECK(tx_book.by_head.count(static_cast<uint16_t>(e.id)) == 1);
    FUZZ_CHECK(txq.Settle(e.id));
    FUZZ_CHECK(e.len == 0);
  }
  for (const Frame& f : wire.from_guest) {
    FUZZ_CHECK(!f.empty() && f.size() <= Net::kMaxFrameBytes);
    if (rings_clobbered) continue;
    bool found = false;
    while (!found && next < tx_order.size()) {
      const Posted* pc = tx_order[next++];
      // Stray buffers, or bytes an rx frame may have overwritten: unknown.
      if (!pc->sane || clobbered(*pc)) { found = true; continue; }
      found = pc->readable.size() == f.size() + Net::kHeaderSize &&
              std::equal(f.begin(), f.end(), pc->readable.begin() + Net::kHeaderSize);
    }
    FUZZ_CHECK(found);
  }

  // rx: filled buffers hold a zero header and the pushed frames, in order.
  size_t next_frame = 0;
  bool frames_known = true;
  for (const auto& e : rxq.TakeUsed()) {
    if (rings_clobbered) continue;
    auto it = rx_book.by_head.find(static_cast<uint16_t>(e.id));
    FUZZ_CHECK(it != rx_book.by_head.end());
    FUZZ_CHECK(rxq.Settle(e.id));
    const Posted& pc = it->second;
    FUZZ_CHECK(e.len <= pc.writable);
    FUZZ_CHECK(e.len == 0 || e.len >= Net::kHeaderSize);
    // A stray write over this buffer: its bytes are not the frame's, and
    // which frame it held cannot be told, so frame order is unknown from here.
    if (clobbered(pc)) frames_known = false;
    if (e.len == 0 || !pc.sane || pc.bufs.size() != 1 || was_reset || !frames_known) continue;
    Frame got(e.len);
    FUZZ_CHECK(mem.Read(pc.bufs[0].addr, got.data(), got.size()).ok());
    for (size_t i = 0; i < 10; ++i) FUZZ_CHECK(got[i] == 0);
    FUZZ_CHECK(got[10] == 1 && got[11] == 0);
    const size_t flen = e.len - Net::kHeaderSize;
    bool found = false;
    while (!found && next_frame < pushed.size()) {
      const Frame& f = pushed[next_frame++];
      found = f.size() == flen && std::equal(f.begin(), f.end(), got.begin() + Net::kHeaderSize);
    }
    FUZZ_CHECK(found);
  }
  const virtio::NetStats s = dev->stats();
  FUZZ_CHECK(s.rx_frames + s.rx_dropped <= pushed.size());
  FUZZ_CHECK(s.tx_frames == (wire.fail_sends ? 0 : wire.from_guest.size()));
  return 0;
}
