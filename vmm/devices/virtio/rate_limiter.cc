#include "vmm/devices/virtio/rate_limiter.h"

#include <algorithm>

namespace kubicle::vmm::devices::virtio {

TokenBucket::TokenBucket(uint64_t rate_per_sec, uint64_t min_capacity, Nanos now)
    : rate_(rate_per_sec),
      capacity_(std::max(rate_per_sec, min_capacity)),
      tokens_(capacity_),
      last_(now) {}

void TokenBucket::Refill(Nanos now) {
  if (rate_ == 0 || now <= last_) return;
  if (tokens_ >= capacity_) {
    last_ = now;
    return;
  }
  // 128 bits: a rate of 10^10/s over an hour's gap would overflow 64.
  const unsigned __int128 elapsed = now - last_;
  const unsigned __int128 added = elapsed * rate_ / kNanosPerSecond;
  if (added == 0) return;  // keep last_: the fraction of a token is not lost
  if (added >= capacity_ - tokens_) {
    tokens_ = capacity_;
    last_ = now;
    return;
  }
  tokens_ += static_cast<uint64_t>(added);
  // Advance only by the time those whole tokens took.
  last_ += static_cast<Nanos>(added * kNanosPerSecond / rate_);
}

uint64_t TokenBucket::Available(Nanos now) {
  if (rate_ == 0) return UINT64_MAX;
  Refill(now);
  return tokens_;
}

bool TokenBucket::TryTake(uint64_t n, Nanos now) {
  if (rate_ == 0) return true;
  Refill(now);
  n = std::min(n, capacity_);
  if (tokens_ < n) return false;
  tokens_ -= n;
  return true;
}

Nanos TokenBucket::WaitFor(uint64_t n, Nanos now) {
  if (rate_ == 0) return 0;
  Refill(now);
  n = std::min(n, capacity_);
  if (tokens_ >= n) return 0;
  const unsigned __int128 missing = n - tokens_;
  // Time until last_ + wait gives `missing` whole tokens, rounded up.
  const unsigned __int128 until = (missing * kNanosPerSecond + rate_ - 1) / rate_;
  const Nanos due = last_ + static_cast<Nanos>(until);
  return due > now ? due - now : 1;
}

RateLimiter::RateLimiter(const RateLimit& limit, uint64_t max_frame_bytes, Nanos now)
    : bytes_(limit.bytes_per_sec, max_frame_bytes, now),
      packets_(limit.packets_per_sec, 1, now) {}

bool RateLimiter::TryTake(uint64_t frame_bytes, Nanos now) {
  if (bytes_.Available(now) < std::min(frame_bytes, bytes_.capacity()) ||
      packets_.Available(now) < 1)
    return false;
  return bytes_.TryTake(frame_bytes, now) && packets_.TryTake(1, now);
}

Nanos RateLimiter::WaitFor(uint64_t frame_bytes, Nanos now) {
  return std::max(bytes_.WaitFor(frame_bytes, now), packets_.WaitFor(1, now));
}

}  // namespace kubicle::vmm::devices::virtio
