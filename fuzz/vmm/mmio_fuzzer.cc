// Fuzzes the virtio-mmio transport: a device (virtio-blk over an in-memory
// disk, or virtio-rng) driven by a sequence of register and config-space
// reads and writes, queue kicks, guest memory stores and snapshot
// save/restore, all from the input. The op set lets the fuzzer run the whole
// handshake (and every out-of-order variant of it) with rings anywhere.
//
// Input: u8 device (even: blk, odd: rng), then ops until the end:
//   0 read   u16 offset (% 4 KiB, or with width bit 7 a raw u64), u8 width
//   1 write  the same, then u64 value
//   2 notify u16 queue          3 poke  u32 guest address, u8 n, n bytes
//   4 KickQueues (resume)       5 SaveState, RestoreState, SaveState again
//   6 probe  u8 queue-size log2, u32 ring base: the Linux driver sequence
//   7 reset  (Status = 0)
//
// Checked: nothing crashes or reads outside guest memory; MagicValue always
// reads "virt"; a restored state reads back exactly as it was saved; an
// active device has DRIVER_OK set.
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "fuzz/vmm/virtio_driver.h"
#include "fuzz/vmm/zero_disk.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/rng.h"

namespace kubicle::fuzz {
namespace {

constexpr uint64_t kRam = 256 << 10;

GuestMemory& Memory() {
  static GuestMemory* mem = [] {
    auto m = GuestMemory::CreateAnonymous({{0, kRam}});
    FUZZ_CHECK(m.ok());
    return m->release();
  }();
  return *mem;
}

uint64_t Offset(FuzzInput& in, uint8_t* width) {
  const uint16_t off = in.U16();
  *width = in.U8();
  if (*width & 0x80) return in.U64();
  return off % virtio::MmioTransport::kMmioSize;
}

size_t Width(uint8_t w) {
  static constexpr size_t kWidths[] = {4, 4, 1, 2, 8, 3, 4, 16};
  return kWidths[w % 8];
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  GuestMemory& mem = Memory();
  std::memset(mem.HostPointer(0, kRam), 0, kRam);
  FuzzInput in(data, size);

  std::unique_ptr<virtio::VirtioDevice> dev;
  if (in.U8() % 2 == 0) {
    dev = std::make_unique<virtio::Block>(std::make_unique<ZeroDisk>(), "fuzz-disk");
  } else {
    dev = std::make_unique<virtio::Rng>();
  }
  auto irq = std::make_shared<NullInterrupt>();
  auto created = virtio::MmioTransport::Create(std::move(dev), mem, irq);
  FUZZ_CHECK(created.ok());
  virtio::MmioTransport& t = **created;
  MmioDriver drv(t);

  uint8_t buf[16];
  for (int steps = 0; !in.empty() && steps < 2048; ++steps) {
    switch (in.U8() % 8) {
      case 0: {
        uint8_t w;
        const uint64_t off = Offset(in, &w);
        t.Read(off, {buf, Width(w)});
        break;
      }
      case 1: {
        uint8_t w;
        const uint64_t off = Offset(in, &w);
        const uint64_t v = in.U64();
        std::memcpy(buf, &v, 8);
        std::memcpy(buf + 8, &v, 8);
        t.Write(off, {buf, Width(w)});
        break;
      }
      case 2:
        t.NotifyQueue(in.U16());
        break;
      case 3: {
        const uint32_t at = in.U32() % kRam;
        auto bytes = in.Bytes(in.U8());
        (void)mem.Write(at, bytes.data(), std::min<uint64_t>(bytes.size(), kRam - at));
        break;
      }
      case 4:
        t.KickQueues();
        break;
      case 5: {
        const virtio::MmioTransportState saved = t.SaveState();
        kubicle::Status s = t.RestoreState(saved);
        // Restore processes no queue: what was saved reads back unchanged.
        if (s.ok()) FUZZ_CHECK(t.SaveState() == saved);
        break;
      }
      case 6: {
        const uint16_t qsize = uint16_t(1u << (in.U8() % 9));
        const GuestAddress base = (in.U32() % kRam) & ~GuestAddress{15};
        std::vector<DriverQueue> qs;
        std::vector<DriverQueue*> ptrs;
        qs.reserve(t.num_queues());
        for (uint16_t i = 0; i < t.num_queues(); ++i) {
          qs.emplace_back(mem, base + i * (20ull * qsize + 64), qsize);
          ptrs.push_back(&qs.back());
        }
        (void)drv.Init(kAllFeatures, ptrs);
        break;
      }
      case 7:
        drv.Write32(0x70, 0);
        break;
    }
    FUZZ_CHECK(drv.Read32(0) == virtio::MmioTransport::kMagic);
    if (t.active()) FUZZ_CHECK(t.status() & virtio::kStatusDriverOk);
  }
  return 0;
}
