// virtio-blk driver of the test guest (see BlockDevice in devices.h).
#include "guest/testguest/arch/cpu.h"
#include "guest/testguest/arch/devices.h"
#include "guest/testguest/freestanding.h"
#include "virtio/block.h"

namespace kubicle::guest::testguest::arch {

namespace {
constexpr uint64_t kFeatureRo = virtio::FeatureBit(virtio::kFeatureBlkRo);
constexpr uint64_t kFeatureFlush = virtio::FeatureBit(virtio::kFeatureBlkFlush);
constexpr uint8_t kStatusUnset = 0xff;  // never written by a device
// Polling budget before sleeping, and wakeups without a completion before
// the device is declared broken (other devices' interrupts wake us too).
constexpr int kSpins = 100000;
constexpr int kMaxWakeups = 4096;

__attribute__((section(".bss.large"))) Virtq g_block_queues[BlockDevice::kMaxDisks];

uint64_t Addr(const volatile void* p) { return reinterpret_cast<uint64_t>(p); }
}  // namespace

bool BlockDevice::Init(const VirtioMmio& transport, uint32_t slot, const char** why) {
  if (slot >= kMaxDisks) {
    *why = "more than 4 disks";
    return false;
  }
  transport_ = transport;
  queue_ = &g_block_queues[slot];
  if (!transport_.Negotiate(kFeatureRo | kFeatureFlush, why)) return false;
  if (!transport_.SetupQueue(0, queue_, why)) return false;
  transport_.DriverOk();
  generation_ = transport_.ConfigGeneration();
  props_.capacity_sectors = transport_.ConfigRead64(0);
  props_.read_only = (transport_.features() & kFeatureRo) != 0;
  flush_ = (transport_.features() & kFeatureFlush) != 0;
  ready_ = true;
  ReadId();
  if (!ready_) *why = "no answer to GET_ID";
  return ready_;
}

const DiskProperties& BlockDevice::Refreshed() {
  if (!ready_) return props_;
  const uint32_t g = transport_.ConfigGeneration();
  if (g != generation_) {
    props_.capacity_sectors = transport_.ConfigRead64(0);
    generation_ = g;
  }
  return props_;
}

// The serial as printable ASCII up to the first NUL; empty when the device
// has none (UNSUPP, IOERR).
void BlockDevice::ReadId() {
  Zero(id_buf_, sizeof(id_buf_));
  const DiskResult got = Submit(virtio::kBlkTypeGetId, 0, Addr(id_buf_), sizeof(id_buf_), true);
  if (got != DiskResult::kOk) return;
  for (uint32_t i = 0; i < sizeof(id_buf_) && id_buf_[i] != '\0'; ++i) {
    const char c = id_buf_[i];
    props_.id[i] = (c >= 0x20 && c < 0x7f) ? c : '?';
  }
}

DiskResult BlockDevice::Read(uint64_t sector, uint32_t count, uint8_t* out) {
  return Submit(virtio::kBlkTypeIn, sector, Addr(out), count * wire::kDiskSectorSize, true);
}

DiskResult BlockDevice::Write(uint64_t sector, uint32_t count, const uint8_t* data) {
  return Submit(virtio::kBlkTypeOut, sector, Addr(data), count * wire::kDiskSectorSize, false);
}

DiskResult BlockDevice::Flush() {
  // Without VIRTIO_BLK_F_FLUSH the device writes through: nothing to do.
  return flush_ ? Submit(virtio::kBlkTypeFlush, 0, 0, 0, false) : DiskResult::kOk;
}

DiskResult BlockDevice::Submit(uint32_t type, uint64_t sector, uint64_t data, uint32_t len,
                               bool device_writes) {
  if (!ready_) return DiskResult::kBroken;
  Virtq& q = *queue_;
  header_ = virtio::BlkRequestHeader{type, 0, sector};
  *static_cast<volatile uint8_t*>(&status_) = kStatusUnset;
  uint16_t next = 1;
  q.desc[0] = {Addr(&header_), sizeof(header_), virtio::kDescFlagNext, 1};
  if (len != 0) {
    const uint16_t direction = device_writes ? virtio::kDescFlagWrite : 0;
    q.desc[1] = {data, len, uint16_t(virtio::kDescFlagNext | direction), 2};
    next = 2;
  }
  q.desc[next] = {Addr(&status_), 1, virtio::kDescFlagWrite, 0};
  q.Push(0);
  transport_.Notify(0);
  uint32_t id = 0, used_len = 0;
  int spins = 0, wakeups = 0;
  while (!q.PopUsed(&id, &used_len)) {
    if (spins < kSpins) {
      ++spins;
      Pause();
    } else if (++wakeups <= kMaxWakeups) {
      Idle();
    } else {
      ready_ = false;
      return DiskResult::kBroken;
    }
  }
  // The interrupt (if any) has served its purpose; clear it so the status
  // register does not stay pending forever.
  if (spins >= kSpins) transport_.AckInterrupt();
  const uint8_t status = *static_cast<volatile uint8_t*>(&status_);
  if (id != 0 || status == kStatusUnset) {
    ready_ = false;  // something we never posted, or no status written
    return DiskResult::kBroken;
  }
  switch (status) {
    case virtio::kBlkStatusOk: return DiskResult::kOk;
    case virtio::kBlkStatusIoErr: return DiskResult::kIoError;
    case virtio::kBlkStatusUnsupp: return DiskResult::kUnsupported;
    default: ready_ = false; return DiskResult::kBroken;
  }
}

}  // namespace kubicle::guest::testguest::arch
