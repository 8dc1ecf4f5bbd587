// ChainReader / ChainWriter: sequential, bounds-checked access to the
// device-readable and device-writable parts of a DescriptorChain.
//
// The chain's descriptors were validated by Queue::Pop, so the readers work
// on host pointers and cannot reach outside guest memory: every copy is
// clipped to the buffers the guest offered and a request for more returns
// OutOfRange without touching anything past the end. Iovecs() exposes the
// same bytes as iovec arrays so devices can hand guest buffers straight to
// preadv/pwritev/recvmsg/sendmsg without an intermediate copy.
//
// The guest may rewrite its buffers at any time; readers copy out what they
// parse and never re-read a validated field.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "vmm/devices/virtio/queue.h"

namespace kubicle::vmm::devices::virtio {

// Walks one part (readable or writable) of a chain.
class ChainCursor {
 public:
  uint64_t remaining() const { return remaining_; }
  // Bytes consumed so far.
  uint64_t consumed() const { return total_ - remaining_; }
  // Advances by len bytes; OutOfRange (and no movement) if fewer remain.
  Status Skip(uint64_t len);
  // Appends iovecs covering the next min(max_len, remaining()) bytes without
  // consuming them; stops early at max_iov entries. Returns the bytes covered.
  uint64_t Iovecs(uint64_t max_len, std::vector<iovec>* out, size_t max_iov = 1024) const;

 protected:
  ChainCursor(const DescriptorChain& chain, bool writable);
  // Copies len bytes between the chain and buf (direction per to_chain).
  Status Copy(uint8_t* buf, uint64_t len, bool to_chain);

 private:
  const Descriptor* cur_;
  const Descriptor* end_;
  uint64_t offset_ = 0;  // inside *cur_
  uint64_t total_ = 0;
  uint64_t remaining_ = 0;
};

class ChainReader : public ChainCursor {
 public:
  explicit ChainReader(const DescriptorChain& chain) : ChainCursor(chain, false) {}
  Status Read(void* dst, uint64_t len) { return Copy(static_cast<uint8_t*>(dst), len, false); }
  template <typename T>
  Result<T> ReadObj() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    RETURN_IF_ERROR(Read(&v, sizeof(T)));
    return v;
  }
};

class ChainWriter : public ChainCursor {
 public:
  explicit ChainWriter(const DescriptorChain& chain) : ChainCursor(chain, true) {}
  Status Write(const void* src, uint64_t len) {
    return Copy(static_cast<uint8_t*>(const_cast<void*>(src)), len, true);
  }
  template <typename T>
  Status WriteObj(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return Write(&v, sizeof(T));
  }
};

}  // namespace kubicle::vmm::devices::virtio
