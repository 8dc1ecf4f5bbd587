// Fuzzes the split virtqueue (Queue::Pop, AddUsed, NeedsInterrupt) and the
// chain reader/writer over a guest memory whose contents, ring layout, queue
// state and concurrent guest stores all come from the input.
//
// Input: u8 size (1 << (v % 9), or with bit 7 any u16), u8 flags (bit 0:
// EVENT_IDX), u16 next_avail, u16 next_used, u8 layout (0: rings at 0, 0x1000,
// 0x2000; else three u64 addresses follow), u16 op count, the ops, then the
// image of guest RAM [0, 64 KiB). Guest RAM also has [0x20000, +4 KiB), so
// buffers can straddle the hole between the two.
//
// Checked: Pop never reads outside guest memory (ASan) and every chain it
// returns obeys the contract of queue.h (readable before writable, totals,
// host pointers inside guest RAM, at most size descriptors); a broken queue
// stays broken; reads and writes through ChainReader/ChainWriter never move
// past the chain and fail without moving when asked for too much.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "vmm/devices/virtio/chain_io.h"
#include "vmm/devices/virtio/queue.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::fuzz {
namespace {

using vmm::GuestAddress;
using vmm::GuestMemory;
using namespace vmm::devices::virtio;

constexpr uint64_t kRam0 = 64 << 10;
constexpr GuestAddress kRam1Base = 0x20000;
constexpr uint64_t kRam1 = 4096;
constexpr uint16_t kMaxQueue = 256;

GuestMemory& Memory() {
  static GuestMemory* mem = [] {
    auto m = GuestMemory::CreateAnonymous({{0, kRam0}, {kRam1Base, kRam1}});
    FUZZ_CHECK(m.ok());
    return m->release();
  }();
  return *mem;
}

void CheckChain(const GuestMemory& mem, const Queue& q, const DescriptorChain& c) {
  FUZZ_CHECK(!c.descriptors.empty());
  FUZZ_CHECK(c.descriptors.size() <= q.state().size);
  FUZZ_CHECK(c.head < q.state().size);
  uint64_t readable = 0, writable = 0;
  bool seen_writable = false;
  for (const Descriptor& d : c.descriptors) {
    FUZZ_CHECK(!(seen_writable && !d.device_writable));
    seen_writable |= d.device_writable;
    FUZZ_CHECK(d.host == mem.HostPointer(d.addr, d.len));
    FUZZ_CHECK(d.host != nullptr);
    (d.device_writable ? writable : readable) += d.len;
  }
  FUZZ_CHECK(readable == c.readable_len);
  FUZZ_CHECK(writable == c.writable_len);
}

// Consumes the chain the way a device would, with lengths from the input.
uint32_t UseChain(FuzzInput& ops, const DescriptorChain& c) {
  static std::vector<uint8_t> buf(1 << 17);
  ChainReader r(c);
  for (int i = 0, n = ops.U8() % 4; i < n; ++i) {
    const uint64_t len = uint64_t{ops.U16()} * (1u + ops.U8() % 3u);
    const uint64_t before = r.remaining();
    const bool skip = ops.Bool();
    Status s = skip ? r.Skip(len) : r.Read(buf.data(), std::min<uint64_t>(len, buf.size()));
    const uint64_t asked = skip ? len : std::min<uint64_t>(len, buf.size());
    FUZZ_CHECK(s.ok() == (asked <= before));
    FUZZ_CHECK(r.remaining() == (s.ok() ? before - asked : before));
    FUZZ_CHECK(r.consumed() + r.remaining() == c.readable_len);
  }
  std::vector<iovec> iov;
  const uint64_t covered = r.Iovecs(ops.U32(), &iov, 1 + ops.U8() % 8);
  uint64_t sum = 0;
  for (const iovec& v : iov) sum += v.iov_len;
  FUZZ_CHECK(sum == covered && covered <= r.remaining());

  ChainWriter w(c);
  for (int i = 0, n = ops.U8() % 4; i < n; ++i) {
    const uint64_t len = std::min<uint64_t>(ops.U16(), buf.size());
    std::memset(buf.data(), 0xa5, len);
    const uint64_t before = w.remaining();
    Status s = w.Write(buf.data(), len);
    FUZZ_CHECK(s.ok() == (len <= before));
  }
  return static_cast<uint32_t>(w.consumed());
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  GuestMemory& mem = Memory();
  FuzzInput in(data, size);

  const uint8_t size_byte = in.U8();
  const uint16_t qsize = (size_byte & 0x80) ? in.U16() : uint16_t(1u << (size_byte % 9));
  const uint8_t flags = in.U8();
  QueueState st;
  st.size = qsize;
  st.ready = true;
  st.event_idx = flags & 1;
  st.next_avail = in.U16();
  st.next_used = in.U16();
  if (in.U8() == 0) {
    st.desc_table = 0;
    st.avail_ring = 0x1000;
    st.used_ring = 0x2000;
  } else {
    st.desc_table = in.U64();
    st.avail_ring = in.U64();
    st.used_ring = in.U64();
  }
  auto op_bytes = in.Bytes(in.U16());
  FuzzInput ops(op_bytes.data(), op_bytes.size());
  auto image = in.Rest();
  std::memset(mem.HostPointer(0, kRam0), 0, kRam0);
  std::memset(mem.HostPointer(kRam1Base, kRam1), 0, kRam1);
  std::memcpy(mem.HostPointer(0, kRam0), image.data(), std::min<size_t>(image.size(), kRam0));

  Queue q(kMaxQueue);
  q.Restore(st);
  if (!q.Validate(mem).ok()) return 0;  // the transport never activates it

  DescriptorChain chain;
  bool last_pop_ok = false;
  for (int steps = 0; !ops.empty() && steps < 4096; ++steps) {
    const uint8_t op = ops.U8();
    const bool after_pop = last_pop_ok;
    last_pop_ok = false;
    switch (op % 6) {
      case 0: {
        const bool was_broken = q.broken();
        auto got = q.Pop(mem, &chain);
        if (!got.ok()) {
          FUZZ_CHECK(q.broken());
          break;
        }
        FUZZ_CHECK(!was_broken);
        if (!*got) break;
        CheckChain(mem, q, chain);
        last_pop_ok = true;
        const uint32_t written = UseChain(ops, chain);
        FUZZ_CHECK(written <= chain.writable_len);
        if (ops.Bool()) {
          kubicle::Status s = q.AddUsed(mem, chain.head, written);
          FUZZ_CHECK(s.ok() || q.broken());
          last_pop_ok = false;
        }
        break;
      }
      case 1:
        (void)q.NeedsInterrupt(mem);
        break;
      case 2: {  // the guest changes its memory behind the device's back
        const uint16_t off = ops.U16();
        const uint8_t v = ops.U8();
        (void)mem.WriteObj<uint8_t>(off, v);
        break;
      }
      case 3: {  // the guest publishes a new avail index
        const uint16_t idx = ops.U16();
        (void)mem.StoreRelease16(st.avail_ring + 2, idx);
        break;
      }
      case 4:
        if (after_pop) q.UndoPop();
        break;
      case 5: {  // AddUsed for a head the device made up (or the guest's)
        (void)q.AddUsed(mem, ops.U16(), ops.U32());
        break;
      }
    }
  }
  return 0;
}
