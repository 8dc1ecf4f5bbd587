// Fuzzes virtio-blk request parsing: a Block device behind a real
// MmioTransport, probed like Linux does, then handed request chains whose
// layout (buffers, lengths, directions, stray addresses) and bytes (the
// 16-byte header: type, sector) come from the input.
//
// Input: u8 flags (bit 0: read-only disk, bit 1: no EVENT_IDX, bit 2: the
// backend fails), u16 disk size in bytes (a partial last sector allowed),
// u8 chain count, per chain u8 buffer count (% 8) and per buffer u16 length,
// u8 flags (bit 0: device-writable, bit 1: a raw u64 guest address follows)
// and, for readable buffers, their bytes; then u8 kicks.
//
// Checked: the backend is only ever asked for whole, in-range offsets (the
// device validates every request first); every used entry reports at most
// the chain's writable bytes; the status byte is OK, IOERR or UNSUPP. And
// each chain taken from the available ring is answered exactly once, in
// order: all of them while the queue works, a prefix of them when a chain
// broke it (DEVICE_NEEDS_RESET).
//
// A raw address may aim the device's writes at the driver's own rings (a
// status byte over avail->idx republishes heads: the device then answers
// each republication once, as it must, and the driver sees a head twice) or
// at another chain's buffers. The checks of what the driver reads back skip
// what such stray writes cover (StrayWrites); the device is then held only
// to memory safety, the backend's contract and a bounded drain.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "fuzz/vmm/virtio_driver.h"
#include "vmm/devices/virtio/block.h"

namespace kubicle::fuzz {
namespace {

using virtio::Block;
using virtio::BlockBackend;

constexpr uint64_t kRam = 1 << 20;
constexpr GuestAddress kQueueBase = 0;
constexpr GuestAddress kHeapBase = 0x4000;

class MemoryBackend final : public BlockBackend {
 public:
  MemoryBackend(uint64_t size, bool read_only, bool fail)
      : bytes_(size), read_only_(read_only), fail_(fail) {
    for (size_t i = 0; i < bytes_.size(); ++i) bytes_[i] = static_cast<uint8_t>(i * 131 + 7);
  }
  uint64_t size() const override { return bytes_.size(); }
  bool read_only() const override { return read_only_; }
  Status ReadV(uint64_t offset, std::span<const iovec> iov) override {
    uint64_t at = Check(offset, iov);
    for (const iovec& v : iov) {
      std::memcpy(v.iov_base, bytes_.data() + at, v.iov_len);
      at += v.iov_len;
    }
    return fail_ ? Status::Internal("injected read error") : Status::Ok();
  }
  Status WriteV(uint64_t offset, std::span<const iovec> iov) override {
    FUZZ_CHECK(!read_only_);
    uint64_t at = Check(offset, iov);
    for (const iovec& v : iov) {
      std::memcpy(bytes_.data() + at, v.iov_base, v.iov_len);
      at += v.iov_len;
    }
    return fail_ ? Status::Internal("injected write error") : Status::Ok();
  }
  Status Flush() override { return fail_ ? Status::Internal("injected") : Status::Ok(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  // What block_backend.h promises: only in-range, whole-sector requests.
  uint64_t Check(uint64_t offset, std::span<const iovec> iov) {
    uint64_t total = 0;
    for (const iovec& v : iov) total += v.iov_len;
    FUZZ_CHECK(offset % Block::kSectorSize == 0 && total % Block::kSectorSize == 0);
    FUZZ_CHECK(offset <= bytes_.size() && total <= bytes_.size() - offset);
    return offset;
  }
  std::vector<uint8_t> bytes_;
  bool read_only_;
  bool fail_;
};

GuestMemory& Memory() {
  static GuestMemory* mem = [] {
    auto m = GuestMemory::CreateAnonymous({{0, kRam}});
    FUZZ_CHECK(m.ok());
    return m->release();
  }();
  return *mem;
}

struct PostedChain {
  std::vector<Buf> bufs;
  uint32_t writable = 0;
  bool sane = true;  // every buffer inside RAM (the fuzzer laid it out)
};

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  GuestMemory& mem = Memory();
  std::memset(mem.HostPointer(0, kRam), 0, kRam);
  FuzzInput in(data, size);

  const uint8_t flags = in.U8();
  const uint16_t disk_bytes = in.U16();
  auto backend_owned = std::make_unique<MemoryBackend>(disk_bytes, flags & 1, flags & 4);
  MemoryBackend* backend = backend_owned.get();
  auto irq = std::make_shared<NullInterrupt>();
  auto t = virtio::MmioTransport::Create(std::make_unique<Block>(std::move(backend_owned), "fuzz"),
                                         mem, irq);
  FUZZ_CHECK(t.ok());
  MmioDriver drv(**t);
  DriverQueue q(mem, kQueueBase, Block::kQueueSize);
  uint64_t wanted = kAllFeatures;
  if (flags & 2) wanted &= ~virtio::FeatureBit(virtio::kFeatureRingEventIdx);
  FUZZ_CHECK(drv.Init(wanted, {&q}));

  GuestHeap heap(kHeapBase, kRam);
  StrayWrites stray;
  std::map<uint16_t, PostedChain> by_head;
  std::vector<uint16_t> posted_order;
  uint16_t next_head = 0;
  size_t descs = 0;
  const uint8_t nchains = in.U8();
  for (uint32_t c = 0; c < nchains && !in.empty(); ++c) {
    PostedChain pc;
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
        if (buf.addr == 0) break;
        if (!buf.writable) {
          auto bytes = in.Bytes(len);
          (void)mem.Write(buf.addr, bytes.data(), bytes.size());
        }
      }
      if (buf.writable) pc.writable += buf.len;
      pc.bufs.push_back(buf);
    }
    if (pc.bufs.empty()) continue;
    // At most one lap of the descriptor table, so heads stay unique.
    if (descs + pc.bufs.size() > Block::kQueueSize) break;
    descs += pc.bufs.size();
    if (!pc.sane)
      for (const Buf& b : pc.bufs) stray.Add(b);
    q.AddChain(pc.bufs);
    by_head[next_head] = pc;
    posted_order.push_back(next_head);
    next_head = static_cast<uint16_t>((next_head + pc.bufs.size()) % Block::kQueueSize);
  }
  const int kicks = 1 + in.U8() % 3;
  for (int k = 0; k < kicks; ++k) drv.Notify(0);

  const auto used = q.TakeUsed();
  // A stray write over the rings (the used ring's ids and index included)
  // leaves nothing there that the device alone wrote: checked first.
  if (stray.Overlaps(kQueueBase, q.end() - kQueueBase)) return 0;  // the rings are not the driver's
  // DrainQueue's bound: at most kDrainRingsBound rings' worth per kick.
  FUZZ_CHECK(used.size() <= size_t{virtio::kDrainRingsBound} * Block::kQueueSize * kicks);
  for (const auto& e : used) FUZZ_CHECK(e.id < Block::kQueueSize);

  const bool broken = (drv.Read32(0x70) & virtio::kStatusDeviceNeedsReset) != 0;
  FUZZ_CHECK(used.size() <= posted_order.size());
  if (!broken) FUZZ_CHECK(used.size() == posted_order.size());
  for (size_t i = 0; i < used.size(); ++i) {
    const auto& e = used[i];
    FUZZ_CHECK(e.id == posted_order[i]);  // once each, in ring order
    FUZZ_CHECK(q.Settle(e.id));
    const PostedChain& pc = by_head.at(posted_order[i]);
    FUZZ_CHECK(e.len <= pc.writable);
    if (e.len == 0 || !pc.sane) continue;
    // The status byte: the last writable byte of the chain.
    const Buf* last = nullptr;
    for (const Buf& b : pc.bufs)
      if (b.writable && b.len > 0) last = &b;
    FUZZ_CHECK(last != nullptr);
    const GuestAddress status_at = last->addr + last->len - 1;
    if (stray.Overlaps(status_at, 1)) continue;  // a later chain wrote over it
    auto status = mem.ReadObj<uint8_t>(status_at);
    FUZZ_CHECK(status.ok() && *status <= 2);
  }
  (void)backend;
  return 0;
}
