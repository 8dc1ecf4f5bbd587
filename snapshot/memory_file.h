// The snapshot's `memory` file: guest RAM, every region in order, back to
// back (region i starts at the sum of the sizes before it; the MMIO hole is
// not stored). Written sparse: only pages that hold non-zero bytes are
// written, everything else is a hole. Restored by mapping it MAP_PRIVATE, so
// every VM of a template shares the page cache and faults pages in lazily;
// nothing on the restore path is proportional to memory size.
//
// Contracts:
// - WriteMemoryFile runs with the guest paused (memory must not change).
//   Untouched pages are found without touching them: for anonymous private
//   memory, /proc/self/pagemap says which pages were never faulted in (or
//   swapped) and those are skipped; other memory (e.g. a restored VM's
//   file-backed mapping) is read and zero-checked page by page.
// - MapMemoryFile refuses a file shorter than the guest's memory (DataLoss):
//   touching a page past the end of a file mapping is SIGBUS. The file must
//   not be truncated or rewritten while any VM maps it (snapshots are
//   immutable; files are made read-only by SnapshotDir).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/mmap_region.h"
#include "common/status.h"
#include "snapshot/state.h"

namespace kubicle::snapshot {

// One range of guest RAM as the host maps it: what a snapshot reads when it
// is written (the VMM's GuestMemory regions, seen through this plain view).
struct MemoryRegion {
  uint64_t guest_base = 0;
  uint64_t size = 0;
  const uint8_t* host = nullptr;
};

struct MemoryFileInfo {
  uint64_t size = 0;        // bytes of guest memory (== file size)
  uint64_t data_bytes = 0;  // bytes actually written (non-zero pages)
  std::string digest;       // chunked SHA-256 (digest.h); empty if not asked
};

struct MemoryWriteOptions {
  bool digest = true;
};

// Writes the regions, in order, to fd, a new empty regular file open for
// writing. Does not fsync (the caller decides when).
Result<MemoryFileInfo> WriteMemoryFile(std::span<const MemoryRegion> regions, int fd,
                                       const MemoryWriteOptions& options = {});

// DataLoss unless a memory file of file_size bytes fits guest_bytes of
// memory exactly (shorter: truncated snapshot; longer: mismatched).
Status CheckMemoryFileSize(const std::string& path, uint64_t file_size, uint64_t guest_bytes);

// Maps path MAP_PRIVATE | MAP_NORESERVE, one mapping per range, in order
// (the VMM makes guest memory of them). The file must be exactly the ranges'
// total size.
Result<std::vector<MmapRegion>> MapMemoryFile(const std::string& path,
                                              const std::vector<MemoryRange>& ranges);

}  // namespace kubicle::snapshot
