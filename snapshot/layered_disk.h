// LayeredDisk: a copy-on-write disk. The guest sees one disk made of a
// read-only shared base image, a chain of frozen read-only layers (bottom
// first) and one writable sparse overlay private to this VM. The VMM puts it
// behind virtio-blk (an adapter to its BlockBackend, vmm/vm_disks.cc): its
// interface here is plain byte I/O over iovecs.
//
//   read  cluster c: overlay if it has c, else the topmost frozen layer
//                    that has c, else the base image.
//   write cluster c: in place if the overlay has c; otherwise the cluster is
//                    first copied up from below (unless the write covers it
//                    whole), written to the overlay and marked allocated.
//   Flush: overlay data durable, then its allocation map (LayerFile).
//
// Fork and snapshot: Freeze() syncs the overlay, seals it read-only, appends
// it to the chain and continues on a fresh empty overlay — O(1) in disk size
// beyond syncing what was written. A fork(2) child then calls
// ReplaceOverlay() for an overlay of its own, before its VM runs:
//
//   parent (VM paused):  DiskChain c = disk->Freeze(parent_overlay_2);
//                        { auto lock = disk->LockForFork(); pid = fork(); }
//   child:               disk->ReplaceOverlay(child_overlay);
//
// Chains are bounded: Freeze fails (ResourceExhausted) at kMaxLayers frozen
// layers; past kFlattenThreshold, NeedsFlatten() is true and a background
// thread should call Flatten(), which merges the frozen layers into one new
// file off the I/O path (reading only immutable files) and swaps it in under
// the lock. Layer files no longer referenced are the caller's to delete.
//
// Thread safety: every public method may be called from any thread; an
// internal mutex serialises them (the I/O path holds it per request).
// Shared layers and the base are never opened for writing.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "snapshot/disk_chain.h"
#include "snapshot/layer_file.h"

namespace kubicle::snapshot {

class LayeredDisk final {
 public:
  static constexpr size_t kMaxLayers = 16;
  static constexpr size_t kFlattenThreshold = 8;

  // Opens chain (base + frozen layers, validated: sizes, ids, parent links)
  // and creates a new empty overlay at overlay_path (must not exist).
  static Result<std::unique_ptr<LayeredDisk>> Create(const DiskChain& chain,
                                                     const std::string& overlay_path,
                                                     uint32_t cluster_shift = kDefaultClusterShift);
  // Opens chain plus an existing, never-frozen overlay (e.g. after a crash).
  static Result<std::unique_ptr<LayeredDisk>> OpenExisting(const DiskChain& chain,
                                                           const std::string& overlay_path);
  ~LayeredDisk();
  LayeredDisk(const LayeredDisk&) = delete;
  LayeredDisk& operator=(const LayeredDisk&) = delete;

  // The guest's view: size() bytes, read and written through iovecs (fills
  // every byte of iov, or an error).
  uint64_t size() const { return size_; }
  Status ReadV(uint64_t offset, std::span<const iovec> iov);
  Status WriteV(uint64_t offset, std::span<const iovec> iov);
  // Overlay data durable, then its allocation map.
  Status Flush();

  // Freezes the overlay into the chain and continues on a new overlay at
  // new_overlay_path. Returns the chain now under the VM (what a snapshot
  // records). On error the disk is unchanged.
  Result<DiskChain> Freeze(const std::string& new_overlay_path);
  // Abandons the current overlay (its file is left alone: after fork(2) it
  // belongs to the parent) and continues on a new empty one.
  Status ReplaceOverlay(const std::string& new_overlay_path);
  // Hold across fork(2) so no request is mid-flight in the child's copy.
  std::unique_lock<std::mutex> LockForFork() { return std::unique_lock<std::mutex>(mu_); }

  DiskChain chain() const;
  std::string overlay_path() const;
  bool NeedsFlatten() const;
  // Merges all frozen layers into one new layer file at out_path and swaps
  // it in. Runs the copy without blocking I/O; meant for a background thread.
  Result<LayerRef> Flatten(const std::string& out_path);
  // Replaces frozen layers [first, first + count) by `merged` (a flatten of
  // exactly those layers, checked by ids).
  Status SwapLayers(size_t first, size_t count, const LayerRef& merged);

 private:
  struct Source;
  LayeredDisk() = default;
  void RebuildOwners();
  Source SourceOf(uint64_t cluster) const;
  Status ReadFrom(const Source& src, uint64_t offset, std::span<const iovec> iov) const;
  Status CopyUpAndWrite(uint64_t cluster, uint64_t within, std::span<const iovec> iov);
  Status WriteRun(uint64_t offset, uint64_t len, std::span<const iovec> iov, size_t iov_skip);
  Result<std::unique_ptr<LayerFile>> NewOverlay(const std::string& path) const;

  mutable std::mutex mu_;
  std::string base_path_;
  UniqueFd base_;
  uint64_t size_ = 0;
  uint32_t cluster_shift_ = kDefaultClusterShift;
  std::vector<std::unique_ptr<LayerFile>> frozen_;  // bottom first
  std::unique_ptr<LayerFile> overlay_;
  // Per cluster: index of the topmost frozen layer holding it, or kBase.
  std::vector<uint8_t> owner_;
  std::vector<uint8_t> cluster_buf_;  // copy-up scratch
};

// Merges chain.layers[first, first + count) into a new frozen layer file at
// out_path (written to a temporary name, synced, made read-only, renamed).
// The result has the id of the top merged layer and the parent of the bottom
// one, so everything above it stays valid. Only reads the merged layers.
Result<LayerRef> FlattenLayers(const DiskChain& chain, size_t first, size_t count,
                               const std::string& out_path);

}  // namespace kubicle::snapshot
