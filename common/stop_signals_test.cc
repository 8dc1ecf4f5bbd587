#include "common/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

namespace kubicle {
namespace {

TEST(StopSignalsTest, ATimeoutIsZeroAndASignalIsItsNumber) {
  const StopSignals stop;
  EXPECT_EQ(stop.WaitFor(std::chrono::milliseconds(10)), 0);
  // Blocked, so it stays pending for the wait instead of killing the test.
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  EXPECT_EQ(stop.WaitFor(std::chrono::seconds(5)), SIGTERM);
  std::thread later([] { ::kill(::getpid(), SIGINT); });
  EXPECT_EQ(stop.Wait(), SIGINT);
  later.join();
}

TEST(StopSignalsTest, TakesTheSignalsItIsGiven) {
  const StopSignals stop({SIGHUP});
  ASSERT_EQ(::kill(::getpid(), SIGHUP), 0);
  EXPECT_EQ(stop.WaitFor(std::chrono::seconds(5)), SIGHUP);
}

}  // namespace
}  // namespace kubicle
