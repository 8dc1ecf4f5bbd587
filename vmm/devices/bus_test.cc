#include "vmm/devices/bus.h"

#include <gtest/gtest.h>

#include <vector>

namespace kubicle::vmm::devices {
namespace {

class Recorder : public BusDevice {
 public:
  void Read(uint64_t offset, std::span<uint8_t> data) override {
    for (auto& b : data) b = static_cast<uint8_t>(offset);
  }
  void Write(uint64_t offset, std::span<const uint8_t> data) override { writes.push_back(offset); }
  std::vector<uint64_t> writes;
};

TEST(BusTest, RoutesByAddressWithOffsets) {
  Bus bus;
  auto a = std::make_shared<Recorder>();
  ASSERT_TRUE(bus.Insert(a, 0x3f8, 8).ok());
  uint8_t v = 0;
  EXPECT_TRUE(bus.Read(0x3fd, {&v, 1}));
  EXPECT_EQ(v, 5);
  uint8_t w = 1;
  EXPECT_TRUE(bus.Write(0x3f8, {&w, 1}));
  EXPECT_EQ(a->writes, std::vector<uint64_t>{0});
}

TEST(BusTest, UnclaimedReadsAllOnes) {
  Bus bus;
  ASSERT_TRUE(bus.Insert(std::make_shared<Recorder>(), 0x1000, 0x100).ok());
  uint32_t v = 0;
  EXPECT_FALSE(bus.Read(0x2000, {reinterpret_cast<uint8_t*>(&v), 4}));
  EXPECT_EQ(v, 0xffffffffu);
  // An access that starts inside but runs past the device is unclaimed too.
  EXPECT_FALSE(bus.Read(0x10fe, {reinterpret_cast<uint8_t*>(&v), 4}));
}

TEST(BusTest, RejectsOverlap) {
  Bus bus;
  ASSERT_TRUE(bus.Insert(std::make_shared<Recorder>(), 0x1000, 0x100).ok());
  EXPECT_FALSE(bus.Insert(std::make_shared<Recorder>(), 0x10ff, 0x10).ok());
  EXPECT_FALSE(bus.Insert(std::make_shared<Recorder>(), 0xff0, 0x11).ok());
  EXPECT_TRUE(bus.Insert(std::make_shared<Recorder>(), 0x1100, 0x10).ok());
}

}  // namespace
}  // namespace kubicle::vmm::devices
