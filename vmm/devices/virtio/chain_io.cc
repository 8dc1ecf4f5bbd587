#include "vmm/devices/virtio/chain_io.h"

#include <algorithm>
#include <cstring>

namespace kubicle::vmm::devices::virtio {

ChainCursor::ChainCursor(const DescriptorChain& chain, bool writable) {
  const Descriptor* begin = chain.descriptors.data();
  const Descriptor* end = begin + chain.descriptors.size();
  // Pop guarantees readable descriptors come first.
  const Descriptor* split = begin;
  while (split != end && !split->device_writable) ++split;
  cur_ = writable ? split : begin;
  end_ = writable ? end : split;
  total_ = remaining_ = writable ? chain.writable_len : chain.readable_len;
}

Status ChainCursor::Skip(uint64_t len) { return Copy(nullptr, len, false); }

Status ChainCursor::Copy(uint8_t* buf, uint64_t len, bool to_chain) {
  if (len > remaining_) return Status::OutOfRange("descriptor chain too short");
  remaining_ -= len;
  while (len > 0) {
    // Zero-length descriptors and exhausted ones are stepped over.
    while (cur_ != end_ && offset_ == cur_->len) {
      ++cur_;
      offset_ = 0;
    }
    uint64_t n = std::min<uint64_t>(len, cur_->len - offset_);
    if (buf != nullptr) {
      uint8_t* p = cur_->host + offset_;
      if (to_chain) {
        std::memcpy(p, buf, n);
      } else {
        std::memcpy(buf, p, n);
      }
      buf += n;
    }
    offset_ += n;
    len -= n;
  }
  return Status::Ok();
}

uint64_t ChainCursor::Iovecs(uint64_t max_len, std::vector<iovec>* out, size_t max_iov) const {
  uint64_t want = std::min(max_len, remaining_);
  uint64_t covered = 0;
  uint64_t off = offset_;
  size_t added = 0;
  for (const Descriptor* d = cur_; d != end_ && covered < want && added < max_iov; ++d) {
    uint64_t n = std::min<uint64_t>(want - covered, d->len - off);
    if (n > 0) {
      out->push_back({d->host + off, static_cast<size_t>(n)});
      covered += n;
      ++added;
    }
    off = 0;
  }
  return covered;
}

}  // namespace kubicle::vmm::devices::virtio
