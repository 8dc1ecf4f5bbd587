// SnapshotDir: a snapshot on disk, a directory holding
//   state      machine state (state.h), versioned, CRC-32C
//   memory     guest RAM, sparse (memory_file.h)
//   disk       JSON index of the disk layer chains the state references
//              (written from the caller's list, meta.h)
//   meta.json  what it is, sizes and digests of the three files above
// (docs/snapshot-format.md).
//
// Contracts:
// - Write is atomic: files go into a hidden temporary directory beside the
//   target, are fsynced with that directory, then renamed into place and the
//   parent fsynced. A crash leaves either no snapshot or a complete one,
//   never a partial one under the final name (only a ".<name>.tmp-*"
//   directory, which RemoveStaleTemps deletes). Files are made read-only: a
//   snapshot is immutable, and its memory file must never change while VMs
//   map it. Write refuses an existing target (AlreadyExists).
// - Open validates before returning: every file present (NotFound), meta.json
//   well formed with a known major version, state decodes (its own checks;
//   device records are the devices' to decode), the disk index parses, file
//   sizes agree with meta.json and with the state (a memory file shorter
//   than guest memory is DataLoss), state and disk digests match. Checking
//   the memory digest reads all of guest memory, so it is opt-in
//   (verify_memory_digest: for imports and transfers, not the restore path).
// - The fast Open does a few small reads and no per-page work: it costs
//   tens of microseconds, and MapMemory is one mmap per memory range.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/mmap_region.h"
#include "common/status.h"
#include "snapshot/memory_file.h"
#include "snapshot/meta.h"
#include "snapshot/state.h"

namespace kubicle::snapshot {

inline constexpr char kStateFileName[] = "state";
inline constexpr char kMemoryFileName[] = "memory";
inline constexpr char kDiskFileName[] = "disk";
inline constexpr char kMetaFileName[] = "meta.json";

struct SnapshotWriteOptions {
  bool digest_memory = true;
};

struct SnapshotOpenOptions {
  bool verify_memory_digest = false;
  DecodeLimits limits;
};

class SnapshotDir {
 public:
  // Writes a snapshot of a paused VM to dir (which must not exist; its parent
  // must): its state, the disks it references (the `disk` index) and its
  // memory. meta supplies template_name and kernel; the rest is filled in
  // and returned.
  static Result<SnapshotMeta> Write(const std::string& dir, const MachineState& state,
                                    const std::vector<DiskIndexEntry>& disks,
                                    std::span<const MemoryRegion> memory, const SnapshotMeta& meta,
                                    const SnapshotWriteOptions& options = {});
  static Result<SnapshotDir> Open(const std::string& dir, const SnapshotOpenOptions& options = {});
  // Deletes ".*.tmp-*" directories a crashed Write left in parent_dir.
  static Status RemoveStaleTemps(const std::string& parent_dir);

  const std::string& path() const { return dir_; }
  const MachineState& state() const { return state_; }
  const SnapshotMeta& meta() const { return meta_; }
  // The `disk` index: the disks the snapshot references.
  const std::vector<DiskIndexEntry>& disks() const { return disks_; }
  std::string memory_path() const { return dir_ + "/" + kMemoryFileName; }
  // The memory file mapped MAP_PRIVATE, one mapping per state memory range.
  Result<std::vector<MmapRegion>> MapMemory() const;

 private:
  SnapshotDir(std::string dir, MachineState state, SnapshotMeta meta,
              std::vector<DiskIndexEntry> disks)
      : dir_(std::move(dir)), state_(std::move(state)), meta_(std::move(meta)),
        disks_(std::move(disks)) {}

  std::string dir_;
  MachineState state_;
  SnapshotMeta meta_;
  std::vector<DiskIndexEntry> disks_;
};

}  // namespace kubicle::snapshot
