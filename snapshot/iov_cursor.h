// IovCursor: walks a guest request's iovec list in order, handing out the
// next n bytes as iovecs (for preadv/pwritev) or copying them. Internal to
// snapshot/. Callers never take more than the list holds (LayeredDisk
// checks request bounds first).
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace kubicle::snapshot::internal {

inline uint64_t IovBytes(std::span<const iovec> iov) {
  uint64_t n = 0;
  for (const iovec& v : iov) n += v.iov_len;
  return n;
}

class IovCursor {
 public:
  explicit IovCursor(std::span<const iovec> iov) : iov_(iov) {}

  // Appends iovecs for the next len bytes to out and advances.
  void Take(uint64_t len, std::vector<iovec>& out) {
    while (len > 0 && i_ < iov_.size()) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(len, iov_[i_].iov_len - off_));
      if (n > 0) out.push_back({static_cast<uint8_t*>(iov_[i_].iov_base) + off_, n});
      Advance(n);
      len -= n;
    }
  }
  // Copies the next len bytes to dst and advances.
  void CopyOut(uint8_t* dst, uint64_t len) {
    while (len > 0 && i_ < iov_.size()) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(len, iov_[i_].iov_len - off_));
      std::memcpy(dst, static_cast<const uint8_t*>(iov_[i_].iov_base) + off_, n);
      Advance(n);
      dst += n;
      len -= n;
    }
  }

 private:
  void Advance(size_t n) {
    off_ += n;
    if (off_ == iov_[i_].iov_len) {
      ++i_;
      off_ = 0;
    }
  }
  std::span<const iovec> iov_;
  size_t i_ = 0;
  size_t off_ = 0;
};

}  // namespace kubicle::snapshot::internal
