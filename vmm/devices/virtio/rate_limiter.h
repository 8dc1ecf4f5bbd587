// TokenBucket / RateLimiter: the per-VM limits of virtio-net (bytes and
// packets per second, each direction). Pure classes over an explicit time
// in nanoseconds, so tests drive them without a clock and the device decides
// where time comes from (CLOCK_MONOTONIC, or a fake in its tests).
//
// A bucket holds at most one second of its rate (its burst), and never less
// than `min_capacity` so that one maximal frame can always pass eventually.
// A rate of 0 is unlimited: TryTake always succeeds and nothing is counted.
// Not thread-safe: the device keeps its limiters under the transport lock.
#pragma once

#include <cstdint>

namespace kubicle::vmm::devices::virtio {

using Nanos = uint64_t;
inline constexpr Nanos kNanosPerSecond = 1'000'000'000;

class TokenBucket {
 public:
  TokenBucket() = default;
  // Starts full at time `now`.
  TokenBucket(uint64_t rate_per_sec, uint64_t min_capacity, Nanos now);

  bool unlimited() const { return rate_ == 0; }
  uint64_t capacity() const { return capacity_; }
  // Tokens available at `now` (refills first).
  uint64_t Available(Nanos now);
  // Takes n tokens if that many are available at `now`; else takes none.
  bool TryTake(uint64_t n, Nanos now);
  // Nanoseconds from `now` until n tokens are available (0: now). n is
  // clipped to the capacity, as TryTake could never succeed past it.
  Nanos WaitFor(uint64_t n, Nanos now);

 private:
  void Refill(Nanos now);

  uint64_t rate_ = 0;  // tokens per second; 0 = unlimited
  uint64_t capacity_ = 0;
  uint64_t tokens_ = 0;
  Nanos last_ = 0;  // the time tokens_ is accounted up to
};

struct RateLimit {
  uint64_t bytes_per_sec = 0;    // 0: unlimited
  uint64_t packets_per_sec = 0;  // 0: unlimited
  bool operator==(const RateLimit&) const = default;
};

// A byte bucket and a packet bucket taken together: a frame passes when
// both have room, and then takes from both.
class RateLimiter {
 public:
  RateLimiter() = default;
  RateLimiter(const RateLimit& limit, uint64_t max_frame_bytes, Nanos now);

  bool unlimited() const { return bytes_.unlimited() && packets_.unlimited(); }
  bool TryTake(uint64_t frame_bytes, Nanos now);
  // Nanoseconds until a frame of frame_bytes would pass (0: now).
  Nanos WaitFor(uint64_t frame_bytes, Nanos now);

 private:
  TokenBucket bytes_;
  TokenBucket packets_;
};

}  // namespace kubicle::vmm::devices::virtio
