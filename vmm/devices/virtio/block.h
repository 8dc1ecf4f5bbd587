// Block: virtio-blk (spec 5.2) over a BlockBackend.
//
// Requests: IN, OUT, FLUSH (fdatasync), GET_ID; anything else is
// VIRTIO_BLK_S_UNSUPP. Data moves with preadv/pwritev directly between the
// backend and the guest's buffers. Every request is checked before the
// backend is touched: a header shorter than 16 bytes, a data length that is
// not a whole number of sectors, a range past the end of the disk (overflow
// safe) or a write to a read-only disk completes with VIRTIO_BLK_S_IOERR; a
// chain with no writable byte for the status is returned with length 0.
// Capacity is size() / 512 sectors (a partial last sector is not exposed).
//
// Persist (persist.h): a snapshot keeps BlockState — read-only flag, serial
// and the backend's SavedChain (the VM freezes a copy-on-write overlay into
// it first); restore reopens that chain through DeviceResources::open_disk.
//
// Features: VERSION_1, RING_EVENT_IDX, SEG_MAX, SIZE_MAX, FLUSH, and RO when
// the backend is read-only. One request queue of kQueueSize entries; requests
// complete synchronously on the thread that kicked the queue.
//
//   ASSIGN_OR_RETURN(auto disk, RawFileBackend::Open(path, read_only));
//   auto blk = std::make_unique<Block>(std::move(disk), "rootfs");
//   ASSIGN_OR_RETURN(auto t, MmioTransport::Create(std::move(blk), mem, irq));
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "snapshot/disk_chain.h"
#include "vmm/devices/virtio/block_backend.h"
#include "vmm/devices/virtio/log_limiter.h"
#include "vmm/devices/virtio/virtio_device.h"

namespace kubicle::vmm::devices::virtio {

struct DeviceResources;

// The GET_ID serial of the workspace slot's device.
inline constexpr char kWorkspaceSerial[] = "workspace";

// What a snapshot keeps of a block device.
struct BlockState {
  bool read_only = false;
  std::string serial;         // GET_ID string
  snapshot::DiskChain chain;  // the read-only files under the disk
  bool operator==(const BlockState&) const = default;
};

class Block final : public VirtioDevice {
 public:
  static constexpr uint16_t kQueueSize = 256;
  static constexpr uint64_t kSectorSize = 512;
  static constexpr size_t kIdBytes = 20;              // VIRTIO_BLK_ID_BYTES
  static constexpr uint32_t kSegMax = kQueueSize - 2;  // header and status take two
  static constexpr uint32_t kSizeMax = 1 << 20;
  static constexpr uint32_t kPersistKind = 2;
  static constexpr size_t kMaxSavedLayers = 64;
  static constexpr size_t kMaxSavedString = 64 * 1024;

  // id: the serial GET_ID returns (truncated to 20 bytes).
  explicit Block(std::unique_ptr<BlockBackend> backend, std::string id = "");

  std::string_view name() const override { return "virtio-blk"; }
  uint32_t device_id() const override;
  uint64_t device_features() const override;
  uint16_t num_queues() const override { return 1; }
  uint16_t queue_max_size(uint16_t) const override { return kQueueSize; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override {
    CopyConfig(config_, offset, data);
  }
  Status Activate() override { return Status::Ok(); }
  void ProcessQueue(uint16_t index) override;
  void Reset() override {}

  // Persist.
  uint32_t persist_kind() const override { return kPersistKind; }
  Result<std::vector<uint8_t>> SaveState() const override;
  static std::vector<uint8_t> EncodeState(const BlockState& state);
  static Result<BlockState> DecodeState(std::span<const uint8_t> bytes, bool newer_minor);
  static Status CheckSaved(std::span<const uint8_t> bytes, bool newer_minor);
  static Result<std::unique_ptr<VirtioDevice>> Restore(std::span<const uint8_t> bytes,
                                                       bool newer_minor,
                                                       const DeviceResources& host);

  uint64_t capacity_sectors() const { return capacity_; }
  // Puts `backend` under the device (the workspace slot: docs/workspaces.md):
  // the capacity is re-read and, once the driver is up, a config-change
  // interrupt tells the guest. The read-only flag must not change (it was
  // negotiated as a feature). Takes the transport lock: any thread.
  Status ReplaceBackend(std::unique_ptr<BlockBackend> backend);
  // The GET_ID serial (without trailing NULs) and the backend, for snapshots.
  std::string id() const;
  BlockBackend* backend() const { return backend_.get(); }

 private:
  // Executes one request; returns the bytes written into the chain.
  uint32_t Execute(const DescriptorChain& chain);
  // Returns the VIRTIO_BLK_S_* status; *data_written counts IN/GET_ID bytes.
  uint8_t Dispatch(const DescriptorChain& chain, uint32_t type, uint64_t sector,
                   uint32_t* data_written);
  uint8_t DoIn(const DescriptorChain& chain, uint64_t sector, uint32_t* data_written);
  uint8_t DoOut(const DescriptorChain& chain, uint64_t sector);
  uint8_t DoGetId(const DescriptorChain& chain, uint32_t* data_written);
  // True when [sector, sector + bytes/512) is inside the disk and bytes is
  // a whole number of sectors.
  bool InRange(uint64_t sector, uint64_t bytes) const;
  void LogReject(const char* why, uint64_t sector, uint64_t bytes);

  std::unique_ptr<BlockBackend> backend_;
  std::array<uint8_t, kIdBytes> id_{};
  uint64_t capacity_;
  std::array<uint8_t, 24> config_{};  // capacity, size_max, seg_max, geometry, blk_size
  DescriptorChain chain_;
  std::vector<iovec> iov_;
  LogLimiter log_limiter_;
};

}  // namespace kubicle::vmm::devices::virtio
