// ZeroDisk: a 32 KiB virtio-blk backend for the fuzzers that reads zeros,
// drops writes, and checks that the device only ever asks for in-range
// bytes (BlockBackend's contract: Block validates every request first).
#pragma once

#include <sys/uio.h>

#include <cstring>
#include <span>

#include "fuzz/common/fuzz_input.h"
#include "vmm/devices/virtio/block_backend.h"

namespace kubicle::fuzz {

class ZeroDisk final : public vmm::devices::virtio::BlockBackend {
 public:
  uint64_t size() const override { return 64 * 512; }
  bool read_only() const override { return false; }
  Status ReadV(uint64_t offset, std::span<const iovec> iov) override {
    uint64_t total = 0;
    for (const iovec& v : iov) {
      std::memset(v.iov_base, 0, v.iov_len);
      total += v.iov_len;
    }
    FUZZ_CHECK(offset <= size() && total <= size() - offset);
    return Status::Ok();
  }
  Status WriteV(uint64_t offset, std::span<const iovec> iov) override {
    uint64_t total = 0;
    for (const iovec& v : iov) total += v.iov_len;
    FUZZ_CHECK(offset <= size() && total <= size() - offset);
    return Status::Ok();
  }
  Status Flush() override { return Status::Ok(); }
};

}  // namespace kubicle::fuzz
