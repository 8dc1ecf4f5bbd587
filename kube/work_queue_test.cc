#include "kube/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace kubicle::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ItemExponentialLimiterTest, DoublesFromFiveMsToCap) {
  ItemExponentialLimiter l(milliseconds(5), seconds(1000));
  EXPECT_EQ(l.When("a"), milliseconds(5));
  EXPECT_EQ(l.When("a"), milliseconds(10));
  EXPECT_EQ(l.When("a"), milliseconds(20));
  EXPECT_EQ(l.When("b"), milliseconds(5));
  for (int i = 0; i < 40; ++i) (void)l.When("a");
  EXPECT_EQ(l.When("a"), seconds(1000));
  l.Forget("a");
  EXPECT_EQ(l.When("a"), milliseconds(5));
}

TEST(BucketLimiterTest, BurstThenQps) {
  FakeClock clock;
  BucketLimiter b(10, 100, &clock);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(b.When(), Duration::zero());
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(b.When()), milliseconds(100));
  clock.Advance(seconds(1));  // 10 tokens back, one owed
  for (int i = 0; i < 9; ++i) EXPECT_EQ(b.When(), Duration::zero());
  EXPECT_GT(b.When(), Duration::zero());
}

TEST(WorkQueueTest, DedupsQueuedKeys) {
  WorkQueue q;
  q.Add("a");
  q.Add("a");
  q.Add("b");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.Get(), "a");
  EXPECT_EQ(q.Get(), "b");
  EXPECT_EQ(q.TryGet(milliseconds(10)), std::nullopt);
}

TEST(WorkQueueTest, KeyBeingProcessedIsParkedUntilDone) {
  WorkQueue q;
  q.Add("a");
  auto k = q.Get();
  ASSERT_EQ(k, "a");
  q.Add("a");  // arrives while a worker holds "a"
  EXPECT_EQ(q.TryGet(milliseconds(20)), std::nullopt) << "same key handed out twice";
  q.Done("a");
  EXPECT_EQ(q.TryGet(milliseconds(20)), "a");
}

TEST(WorkQueueTest, NoConcurrentProcessingOfOneKey) {
  WorkQueue q;
  std::atomic<int> in_flight{0}, max_in_flight{0}, processed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) {
        int n = ++in_flight;
        max_in_flight = std::max(max_in_flight.load(), n);
        std::this_thread::sleep_for(milliseconds(1));
        --in_flight;
        ++processed;
        q.Done(*key);
      }
    });
  }
  for (int i = 0; i < 200; ++i) q.Add("same");
  std::this_thread::sleep_for(milliseconds(100));
  q.ShutDown();
  for (auto& t : workers) t.join();
  EXPECT_EQ(max_in_flight.load(), 1);
  EXPECT_GE(processed.load(), 1);
}

TEST(WorkQueueTest, AddAfterWaitsForTheClock) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.AddAfter("later", seconds(30));
  q.AddAfter("later", seconds(60));  // the earlier wake-up wins
  EXPECT_EQ(q.TryGet(milliseconds(20)), std::nullopt);
  EXPECT_EQ(q.DelayedLen(), 1u);
  clock.Advance(seconds(31));
  q.Poke();
  EXPECT_EQ(q.TryGet(milliseconds(100)), "later");
}

TEST(WorkQueueTest, RateLimitedBacksOffPerItemAndForgetResets) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.AddRateLimited("k");  // 5 ms
  EXPECT_EQ(q.TryGet(milliseconds(10)), std::nullopt);
  clock.Advance(milliseconds(5));
  auto k = q.TryGet(milliseconds(100));
  ASSERT_EQ(k, "k");
  q.Done("k");
  q.AddRateLimited("k");  // 10 ms now
  clock.Advance(milliseconds(6));
  EXPECT_EQ(q.TryGet(milliseconds(10)), std::nullopt);
  clock.Advance(milliseconds(4));
  EXPECT_EQ(q.TryGet(milliseconds(100)), "k");
  EXPECT_EQ(q.Failures("k"), 2);
  q.Forget("k");
  EXPECT_EQ(q.Failures("k"), 0);
}

TEST(WorkQueueTest, ShutDownReleasesWaiters) {
  WorkQueue q;
  std::thread t([&] { EXPECT_EQ(q.Get(), std::nullopt); });
  std::this_thread::sleep_for(milliseconds(20));
  q.ShutDown();
  t.join();
}

}  // namespace
}  // namespace kubicle::kube
