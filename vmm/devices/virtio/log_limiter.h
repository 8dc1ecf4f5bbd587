// LogLimiter: rate limit for log lines a guest can trigger at will (bad MMIO
// accesses, malformed packets). Allows `burst` lines per `period`, counts
// the rest, and reports the count on the next allowed line so nothing is
// silently lost. Not thread-safe: each user holds its own under its lock.
#pragma once

#include <chrono>
#include <cstdint>

namespace kubicle::vmm::devices::virtio {

class LogLimiter {
 public:
  explicit LogLimiter(uint32_t burst = 10,
                      std::chrono::milliseconds period = std::chrono::seconds(1))
      : burst_(burst), period_(period) {}

  // True when a line may be written now.
  bool Allow() {
    auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= period_) {
      window_start_ = now;
      used_ = 0;
    }
    if (used_ < burst_) {
      ++used_;
      return true;
    }
    ++suppressed_;
    return false;
  }
  // Lines suppressed since the last call; log it as a field of the next line.
  uint64_t TakeSuppressed() {
    uint64_t n = suppressed_;
    suppressed_ = 0;
    return n;
  }

 private:
  uint32_t burst_;
  std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point window_start_{};
  uint32_t used_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace kubicle::vmm::devices::virtio
