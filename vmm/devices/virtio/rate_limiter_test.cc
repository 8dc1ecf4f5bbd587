#include "vmm/devices/virtio/rate_limiter.h"

#include <gtest/gtest.h>

namespace kubicle::vmm::devices::virtio {
namespace {

constexpr Nanos kMs = 1'000'000;

TEST(TokenBucketTest, ZeroRateIsUnlimited) {
  TokenBucket b(0, 100, 0);
  EXPECT_TRUE(b.unlimited());
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(b.TryTake(1u << 20, 0));
  EXPECT_EQ(b.WaitFor(1u << 30, 0), 0u);
}

TEST(TokenBucketTest, StartsFullHoldsThenRefillsAtTheRate) {
  TokenBucket b(1000, 1, 0);  // 1000 tokens/s, burst 1000
  EXPECT_TRUE(b.TryTake(1000, 0));
  EXPECT_FALSE(b.TryTake(1, 0));
  EXPECT_EQ(b.WaitFor(1, 0), 1 * kMs);
  EXPECT_EQ(b.WaitFor(500, 0), 500 * kMs);
  EXPECT_FALSE(b.TryTake(500, 499 * kMs));  // a failed take takes nothing
  EXPECT_TRUE(b.TryTake(500, 500 * kMs));
  EXPECT_EQ(b.Available(500 * kMs), 0u);
}

TEST(TokenBucketTest, FractionsOfATokenAreNotLost) {
  TokenBucket b(3, 1, 0);  // one token every 333.33 ms
  ASSERT_TRUE(b.TryTake(3, 0));
  uint64_t got = 0;
  for (Nanos t = 0; t < 10010 * kMs; t += 7 * kMs) got += b.TryTake(1, t);
  EXPECT_EQ(got, 30u);  // exactly the rate over 10 s, despite the 7 ms steps
}

TEST(TokenBucketTest, NeverHoldsMoreThanItsBurst) {
  TokenBucket b(100, 1, 0);
  EXPECT_EQ(b.Available(3600 * 1000 * kMs), 100u);
}

TEST(TokenBucketTest, ATakeLargerThanTheBurstPassesWhenFull) {
  TokenBucket b(10, 1, 0);  // burst 10, a take of 50 is clipped to it
  EXPECT_TRUE(b.TryTake(50, 0));
  EXPECT_FALSE(b.TryTake(50, 0));
  EXPECT_EQ(b.WaitFor(50, 0), 1000 * kMs);
}

TEST(TokenBucketTest, MinimumCapacityLetsAMaximalFrameThrough) {
  TokenBucket b(1000, 65562, 0);
  EXPECT_EQ(b.capacity(), 65562u);
  EXPECT_TRUE(b.TryTake(65562, 0));
}

TEST(TokenBucketTest, HugeRatesAndGapsDoNotOverflow) {
  TokenBucket b(uint64_t{1} << 40, 1, 0);
  ASSERT_TRUE(b.TryTake(uint64_t{1} << 40, 0));
  EXPECT_EQ(b.Available(uint64_t{1} << 62), uint64_t{1} << 40);
}

TEST(RateLimiterTest, BothBucketsMustHaveRoomAndBothAreTaken) {
  RateLimiter l({.bytes_per_sec = 100000, .packets_per_sec = 2}, 1500, 0);
  EXPECT_TRUE(l.TryTake(1000, 0));
  EXPECT_TRUE(l.TryTake(1000, 0));
  EXPECT_FALSE(l.TryTake(10, 0));  // packets exhausted, bytes left
  EXPECT_EQ(l.WaitFor(10, 0), 500 * kMs);
  EXPECT_TRUE(l.TryTake(10, 500 * kMs));
}

TEST(RateLimiterTest, AFailedTakeLeavesTheOtherBucketAlone) {
  RateLimiter l({.bytes_per_sec = 2000, .packets_per_sec = 100}, 1000, 0);
  EXPECT_TRUE(l.TryTake(2000, 0));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(l.TryTake(1000, 0));
  // 99 packets are left: the failed takes cost none.
  for (int i = 0; i < 99; ++i) EXPECT_TRUE(l.TryTake(0, 0));
  EXPECT_FALSE(l.TryTake(0, 0));
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
