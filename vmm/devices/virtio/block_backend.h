// BlockBackend: where virtio-blk's sectors live. The device validates every
// request against size() before calling in, so a backend only ever sees
// in-range offsets; it moves bytes straight between the guest buffers (iovecs
// into guest memory) and its storage.
//
// RawFileBackend is a raw image file used with preadv/pwritev/fdatasync.
// The copy-on-write disk (snapshot::LayeredDisk: base image, frozen layers,
// private overlay) is put behind the same interface by an adapter in
// vmm/vm_disks.cc.
//
// Persist: SavedChain() names the read-only files a snapshot of the disk
// refers to (what Block saves, docs/snapshot-format.md); a backend that
// cannot be snapshotted returns nullopt.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "snapshot/disk_chain.h"

namespace kubicle::vmm::devices::virtio {

class BlockBackend {
 public:
  virtual ~BlockBackend() = default;
  // Bytes addressable by the guest (the device exposes size() / 512 sectors).
  virtual uint64_t size() const = 0;
  virtual bool read_only() const = 0;
  // Fills every byte of iov from [offset, offset + total). An error means the
  // request fails (the guest sees VIRTIO_BLK_S_IOERR).
  virtual Status ReadV(uint64_t offset, std::span<const iovec> iov) = 0;
  virtual Status WriteV(uint64_t offset, std::span<const iovec> iov) = 0;
  // Makes completed writes durable.
  virtual Status Flush() = 0;
  // The files under the guest's view of the disk, as a snapshot records them
  // (the VM freezes a copy-on-write overlay into the chain first). Called
  // with the guest paused.
  virtual std::optional<snapshot::DiskChain> SavedChain() const { return std::nullopt; }
};

class RawFileBackend final : public BlockBackend {
 public:
  static Result<std::unique_ptr<RawFileBackend>> Open(const std::string& path, bool read_only);

  uint64_t size() const override { return size_; }
  bool read_only() const override { return read_only_; }
  Status ReadV(uint64_t offset, std::span<const iovec> iov) override;
  Status WriteV(uint64_t offset, std::span<const iovec> iov) override;
  Status Flush() override;
  // The image itself as the chain's base, with no layers. Meaningful for a
  // read-only image; a writable one changes under any snapshot of it (the VM
  // refuses to snapshot it).
  std::optional<snapshot::DiskChain> SavedChain() const override {
    return snapshot::DiskChain{path_, size_, {}};
  }

 private:
  RawFileBackend(UniqueFd fd, std::string path, uint64_t size, bool read_only)
      : fd_(std::move(fd)), path_(std::move(path)), size_(size), read_only_(read_only) {}
  // Runs preadv/pwritev until all of iov is transferred.
  Status Transfer(uint64_t offset, std::span<const iovec> iov, bool write);

  UniqueFd fd_;
  std::string path_;
  uint64_t size_;
  bool read_only_;
};

}  // namespace kubicle::vmm::devices::virtio
