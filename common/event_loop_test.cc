#include "common/event_loop.h"

#include <gtest/gtest.h>

#include <thread>

namespace kubicle {
namespace {

TEST(EventLoopTest, CallsHandlerAndStopsFromOtherThread) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok()) << loop.status().ToString();
  auto efd = EventFd::Create();
  ASSERT_TRUE(efd.ok());
  int calls = 0;
  ASSERT_TRUE((*loop)->Add(efd->fd(), [&](uint32_t) {
    calls++;
    (void)efd->Consume();
    (*loop)->Stop();
  }).ok());
  std::thread t([&] { (void)efd->Signal(); });
  ASSERT_TRUE((*loop)->Run().ok());
  t.join();
  EXPECT_EQ(calls, 1);
}

TEST(EventLoopTest, HandlerMayRemoveItself) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  auto efd = EventFd::Create();
  ASSERT_TRUE(efd.ok());
  int calls = 0;
  ASSERT_TRUE((*loop)->Add(efd->fd(), [&](uint32_t) {
    calls++;
    EXPECT_TRUE((*loop)->Remove(efd->fd()).ok());
  }).ok());
  ASSERT_TRUE(efd->Signal().ok());
  ASSERT_TRUE((*loop)->RunOnce(100).ok());
  ASSERT_TRUE((*loop)->RunOnce(10).ok());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kubicle
