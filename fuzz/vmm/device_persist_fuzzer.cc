// Fuzzes the device records of a snapshot (docs/snapshot-format.md, 2.4.4
// and 2.4.5), which the `state` decoder hands to the VMM as opaque bytes:
// the serial port's record (vmm/devices/legacy/serial_persist.cc) and a
// virtio-mmio device's record (vmm/devices/virtio/persist.cc: the
// transport's state, then the device's own bytes, decoded by virtio-blk,
// virtio-rng, virtio-vsock or virtio-net). A record that passes is restored
// the way a VM restores it: the device rebuilt (blk over an in-memory disk,
// net over a backend without frames), put behind a new transport, the transport state applied, every queue kicked
// against guest memory the input fills.
//
// Input: u8 selector (bits 0-1: serial, blk, rng, vsock; bit 2: the
// snapshot is from a newer minor version; bit 3: net, whatever bits 0-1 say), u16 record length, the record,
// then bytes copied to guest address 0.
//
// Checked: nothing crashes or reads outside guest memory; a record that
// decodes encodes back to the same bytes (same minor version); CheckDevice
// accepts exactly the records RestoreDevice restores; a transport state
// that restores saves back unchanged (but for event_idx, which activation
// derives from the features).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/event_loop.h"
#include "fuzz/common/fuzz_input.h"
#include "fuzz/vmm/virtio_driver.h"
#include "fuzz/vmm/zero_disk.h"
#include "snapshot/state.h"
#include "vmm/devices/legacy/serial_persist.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/net.h"
#include "vmm/devices/virtio/persist.h"
#include "vmm/devices/virtio/rng.h"
#include "vmm/devices/virtio/vsock.h"

namespace kubicle::fuzz {
namespace {

namespace legacy = vmm::devices::legacy;
using Bytes = std::vector<uint8_t>;

constexpr uint64_t kRam = 256 << 10;

GuestMemory& Memory() {
  static GuestMemory* mem = [] {
    auto m = GuestMemory::CreateAnonymous({{0, kRam}});
    FUZZ_CHECK(m.ok());
    return m->release();
  }();
  return *mem;
}

// virtio-net waits on its own epoll fd (timer), so its transport needs a loop.
EventLoop& Loop() {
  static EventLoop* loop = [] {
    auto l = EventLoop::Create();
    FUZZ_CHECK(l.ok());
    return l->release();
  }();
  return *loop;
}

class NoFrames final : public virtio::NetBackend {
 public:
  int fd() const override { return -1; }
  Status Send(std::span<const iovec>) override { return Status::Ok(); }
  Result<size_t> Receive(std::span<uint8_t>) override { return size_t{0}; }
};

void Serial(std::span<const uint8_t> record, bool newer_minor) {
  auto s = legacy::DecodeSerialState(record, newer_minor);
  if (!s.ok()) return;
  FUZZ_CHECK(s->input.size() <= legacy::Serial::kInputCapacity);
  if (!newer_minor) FUZZ_CHECK(legacy::EncodeSerialState(*s) == Bytes(record.begin(), record.end()));
}

// The device's own bytes, decoded by the device, re-encoded where it can.
void Own(uint32_t kind, const Bytes& own, bool newer_minor) {
  if (kind == virtio::Block::kPersistKind) {
    auto b = virtio::Block::DecodeState(own, newer_minor);
    FUZZ_CHECK(b.ok() == virtio::Block::CheckSaved(own, newer_minor).ok());
    if (b.ok() && !newer_minor) FUZZ_CHECK(virtio::Block::EncodeState(*b) == own);
  } else if (kind == virtio::Vsock::kPersistKind) {
    FUZZ_CHECK(virtio::Vsock::DecodeState(own, newer_minor).ok() ==
               virtio::Vsock::CheckSaved(own, newer_minor).ok());
  } else if (kind == virtio::Net::kPersistKind) {
    FUZZ_CHECK(virtio::Net::DecodeState(own, newer_minor).ok() ==
               virtio::Net::CheckSaved(own, newer_minor).ok());
  }
}

void Restore(const snapshot::VirtioDeviceState& record, bool newer_minor) {
  virtio::DeviceResources host;
  host.open_disk = [](const virtio::BlockState&)
      -> Result<std::unique_ptr<virtio::BlockBackend>> {
    return std::unique_ptr<virtio::BlockBackend>(std::make_unique<ZeroDisk>());
  };
  host.open_net = []() -> Result<std::unique_ptr<virtio::NetBackend>> {
    return std::unique_ptr<virtio::NetBackend>(std::make_unique<NoFrames>());
  };
  const bool checked = virtio::CheckDevice(record, newer_minor).ok();
  auto restored = virtio::RestoreDevice(record, newer_minor, host);
  FUZZ_CHECK(restored.ok() == checked);
  if (!restored.ok()) return;
  auto irq = std::make_shared<NullInterrupt>();
  auto t = virtio::MmioTransport::Create(std::move(restored->device), Memory(), irq, &Loop());
  FUZZ_CHECK(t.ok());
  if (!(*t)->RestoreState(restored->transport).ok()) return;
  // Restore processes no queue: what was applied reads back unchanged,
  // except that activation sets each queue's event_idx from the negotiated
  // features (a record's own flag is not trusted).
  virtio::MmioTransportState want = restored->transport;
  if ((*t)->active()) {
    const bool event_idx = (want.driver_features >> virtio::kFeatureRingEventIdx) & 1;
    for (virtio::QueueState& q : want.queues) q.event_idx = event_idx;
  }
  FUZZ_CHECK((*t)->SaveState() == want);
  (*t)->KickQueues();
  for (uint16_t q = 0; q < (*t)->num_queues(); ++q) (*t)->NotifyQueue(q);
}

void Virtio(uint32_t kind, std::span<const uint8_t> bytes, bool newer_minor) {
  snapshot::VirtioDeviceState record;
  record.kind = kind;
  record.slot = 0;
  record.state.assign(bytes.begin(), bytes.end());
  virtio::MmioTransportState transport;
  Bytes own;
  if (virtio::DecodeRecord(bytes, newer_minor, &transport, &own).ok()) {
    FUZZ_CHECK(transport.queues.size() <= virtio::kMaxSavedQueues);
    if (!newer_minor) FUZZ_CHECK(virtio::EncodeRecord(transport, own) == record.state);
    Own(kind, own, newer_minor);
  } else {
    FUZZ_CHECK(!virtio::CheckDevice(record, newer_minor).ok());
  }
  // Vsock's restore binds a Unix socket: its record is only checked.
  if (kind != virtio::Vsock::kPersistKind) Restore(record, newer_minor);
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  FuzzInput in(data, size);
  const uint8_t selector = in.U8();
  const bool newer_minor = (selector & 4) != 0;
  const std::span<const uint8_t> record = in.Bytes(in.U16());
  GuestMemory& mem = Memory();
  std::memset(mem.HostPointer(0, kRam), 0, kRam);
  const std::span<const uint8_t> ram = in.Bytes(std::min<size_t>(in.remaining(), kRam));
  if (!ram.empty()) std::memcpy(mem.HostPointer(0, ram.size()), ram.data(), ram.size());
  if (selector & 8) {
    Virtio(virtio::Net::kPersistKind, record, newer_minor);
    return 0;
  }
  switch (selector & 3) {
    case 0:
      Serial(record, newer_minor);
      break;
    case 1:
      Virtio(virtio::Block::kPersistKind, record, newer_minor);
      break;
    case 2:
      Virtio(virtio::Rng::kPersistKind, record, newer_minor);
      break;
    default:
      Virtio(virtio::Vsock::kPersistKind, record, newer_minor);
      break;
  }
  return 0;
}
