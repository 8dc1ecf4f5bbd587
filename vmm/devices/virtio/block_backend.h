// BlockBackend: where virtio-blk's sectors live. The device validates every
// request against size() before calling in, so a backend only ever sees
// in-range offsets; it moves bytes straight between the guest buffers (iovecs
// into guest memory) and its storage.
//
// RawFileBackend is a raw image file used with preadv/pwritev/fdatasync. The
// copy-on-write overlay backend of the snapshot work implements the same
// interface.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

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
};

class RawFileBackend final : public BlockBackend {
 public:
  static Result<std::unique_ptr<RawFileBackend>> Open(const std::string& path, bool read_only);

  uint64_t size() const override { return size_; }
  bool read_only() const override { return read_only_; }
  Status ReadV(uint64_t offset, std::span<const iovec> iov) override;
  Status WriteV(uint64_t offset, std::span<const iovec> iov) override;
  Status Flush() override;

 private:
  RawFileBackend(UniqueFd fd, uint64_t size, bool read_only)
      : fd_(std::move(fd)), size_(size), read_only_(read_only) {}
  // Runs preadv/pwritev until all of iov is transferred.
  Status Transfer(uint64_t offset, std::span<const iovec> iov, bool write);

  UniqueFd fd_;
  uint64_t size_;
  bool read_only_;
};

}  // namespace kubicle::vmm::devices::virtio
