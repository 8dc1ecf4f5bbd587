// LayerFile: one copy-on-write disk layer on disk — a header, an allocation
// bitmap stored twice (A/B slots) and a sparse data region where cluster i
// lives at data_offset + i * cluster_size (docs/snapshot-format.md, "Disk
// layers"). A layer is the writable overlay of one VM until it is frozen;
// then it is a shared, read-only layer forever.
//
// Crash safety (what a crash at any instant leaves):
// - The header is written once, at creation, and never again. Creation is
//   durable (file and directory fsynced) before Create returns, or, with
//   CreateOptions::durable false, before the first Sync/Seal writes a map.
// - Allocation is recorded in memory on write and persisted by Sync(), which
//   makes the data durable first (fdatasync) and only then writes the map
//   into the older of the two slots with a higher generation and a CRC-32C,
//   then fdatasyncs again. Open takes the valid slot with the highest
//   generation, so a torn map write falls back to the previous map, and a
//   cluster is never mapped before its data is on disk. Writes after the
//   last Sync may be lost, as on any disk without a flush.
// - Freeze (Seal) syncs, makes the file read-only (mode 0444) and reopens it
//   O_RDONLY: nothing in this code can write a frozen layer again.
// - Destruction never writes (it may happen in a fork(2) child that merely
//   inherited the object).
//
// Not thread-safe: LayeredDisk serialises access.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "snapshot/disk_chain.h"

namespace kubicle::snapshot {

inline constexpr uint32_t kDefaultClusterShift = 16;  // 64 KiB clusters

class LayerFile {
 public:
  struct CreateOptions {
    uint32_t cluster_shift = kDefaultClusterShift;
    std::optional<LayerId> id;  // default: 16 random bytes
    // false: skip the fsyncs of the new file and its directory here; the
    // first Sync or Seal does them, before any map is written. For a VM's
    // private overlay, whose contents carry no promise before a flush,
    // this takes two fsyncs off snapshot, fork and restore.
    bool durable = true;
  };
  // Creates a new, empty, writable layer at path (which must not exist) for a
  // disk of virtual_size bytes on top of parent (zeros: on the base image).
  // The file and its directory are fsynced before this returns.
  static Result<std::unique_ptr<LayerFile>> Create(const std::string& path, uint64_t virtual_size,
                                                   const LayerId& parent,
                                                   const CreateOptions& options);
  // Opens an existing layer; writable only for an overlay that was never frozen.
  static Result<std::unique_ptr<LayerFile>> Open(const std::string& path, bool writable);

  const std::string& path() const { return path_; }
  const LayerId& id() const { return id_; }
  const LayerId& parent() const { return parent_; }
  uint64_t virtual_size() const { return virtual_size_; }
  uint32_t cluster_shift() const { return cluster_shift_; }
  uint64_t cluster_size() const { return uint64_t{1} << cluster_shift_; }
  uint64_t cluster_count() const { return cluster_count_; }
  bool writable() const { return writable_; }
  uint64_t generation() const { return generation_; }

  bool allocated(uint64_t cluster) const { return (bitmap_[cluster / 64] >> (cluster % 64)) & 1; }
  const std::vector<uint64_t>& bitmap() const { return bitmap_; }
  uint64_t allocated_count() const;

  // Data at disk offset `offset` (only meaningful for allocated clusters).
  Status Read(uint64_t offset, std::span<const iovec> iov) const;
  Status Write(uint64_t offset, std::span<const iovec> iov);
  // Records that a cluster now holds its full data (in memory until Sync).
  void MarkAllocated(uint64_t cluster);

  // Data, then allocation map, durable. No-op when nothing changed.
  Status Sync();
  // Sync, chmod 0444, reopen read-only. The layer is frozen from then on.
  Status Seal();

 private:
  LayerFile() = default;
  Status LoadMap();
  Status WriteMapSlot(int slot, uint64_t generation);
  uint64_t MapSlotOffset(int slot) const { return map_offset_ + slot * map_slot_size_; }

  std::string path_;
  UniqueFd fd_;
  bool writable_ = false;
  LayerId id_{};
  LayerId parent_{};
  uint64_t virtual_size_ = 0;
  uint32_t cluster_shift_ = kDefaultClusterShift;
  uint64_t cluster_count_ = 0;
  uint64_t map_offset_ = 0;
  uint64_t map_slot_size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<uint64_t> bitmap_;
  int active_slot_ = 0;
  uint64_t generation_ = 0;
  bool map_dirty_ = false;
  bool data_dirty_ = false;
  bool created_durable_ = true;  // the file and its directory entry are synced
  Status MakeCreationDurable();
};

// Random 16 bytes (getrandom).
LayerId NewLayerId();

}  // namespace kubicle::snapshot
