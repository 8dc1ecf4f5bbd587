// TeardownQueue: order, nothing dropped at Stop, and WaitForProgress, which
// lets a caller short of capacity wait for the VMs being torn down.
#include "noderuntime/manager/teardown_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(TeardownQueue, RunsInOrderAndStopRunsWhatIsQueued) {
  TeardownQueue q;
  q.Start();
  std::vector<int> order;
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  q.Post([&] { opened.wait(); order.push_back(0); });
  for (int i = 1; i < 5; ++i) q.Post([&, i] { order.push_back(i); });
  EXPECT_EQ(q.pending(), 5u);
  gate.set_value();
  q.Stop();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  bool ran_inline = false;
  q.Post([&] { ran_inline = true; });  // after Stop: on the caller's thread
  EXPECT_TRUE(ran_inline);
}

TEST(TeardownQueue, WaitForProgressReturnsWhenATaskFinishes) {
  TeardownQueue q;
  q.Start();
  EXPECT_FALSE(q.WaitForProgress(Clock::now() + 10s)) << "nothing queued: nothing to wait for";
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  std::atomic<bool> done{false};
  q.Post([&] { opened.wait(); done = true; });
  EXPECT_FALSE(q.WaitForProgress(Clock::now() + 20ms)) << "the deadline passes while it runs";
  auto opener = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    gate.set_value();
  });
  const bool progressed = q.WaitForProgress(Clock::now() + 30s);
  // True when the task finished while it waited; false only when this thread
  // came too late to wait at all (the task already done, nothing queued).
  EXPECT_TRUE(progressed || done) << "returned before the task finished";
  opener.get();
  q.Drain();
  EXPECT_TRUE(done);
}

}  // namespace
}  // namespace kubicle::noderuntime
