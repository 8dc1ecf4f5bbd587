#include "vmm/memory/guest_memory.h"

#include <gtest/gtest.h>

namespace kubicle::vmm {
namespace {

std::unique_ptr<GuestMemory> TwoRegions() {
  auto mem = GuestMemory::CreateAnonymous({{0, 0x10000}, {0x100000, 0x1000}});
  EXPECT_TRUE(mem.ok()) << mem.status().ToString();
  return std::move(mem).value();
}

TEST(GuestMemoryTest, ReadWriteInsideRegion) {
  auto mem = TwoRegions();
  ASSERT_TRUE(mem->WriteObj<uint32_t>(0x1000, 0xdeadbeef).ok());
  EXPECT_EQ(*mem->ReadObj<uint32_t>(0x1000), 0xdeadbeefu);
  ASSERT_TRUE(mem->WriteObj<uint8_t>(0x100fff, 7).ok());
  EXPECT_EQ(mem->total_size(), 0x11000u);
  EXPECT_EQ(mem->end(), 0x101000u);
}

TEST(GuestMemoryTest, RejectsOutOfRangeAndStraddling) {
  auto mem = TwoRegions();
  EXPECT_EQ(mem->ReadObj<uint32_t>(0xfffe).status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(mem->IsValidRange(0x10000, 1));            // in the hole
  EXPECT_FALSE(mem->IsValidRange(0x100ffc, 8));           // runs off the end
  EXPECT_FALSE(mem->IsValidRange(~0ull - 2, 8));          // wraps around
  EXPECT_FALSE(mem->IsValidRange(0x8000, ~0ull));         // absurd length
  EXPECT_TRUE(mem->IsValidRange(0x10000, 0));             // empty at region end
  EXPECT_TRUE(mem->IsValidRange(0xff00, 0x100));
}

TEST(GuestMemoryTest, AtomicAccessorsCheckAlignment) {
  auto mem = TwoRegions();
  ASSERT_TRUE(mem->StoreRelease16(0x20, 0x1234).ok());
  EXPECT_EQ(*mem->LoadAcquire16(0x20), 0x1234);
  EXPECT_EQ(mem->LoadAcquire16(0x21).status().code(), StatusCode::kInvalidArgument);
}

TEST(GuestMemoryTest, RejectsOverlappingRanges) {
  auto mem = GuestMemory::CreateAnonymous({{0, 0x2000}, {0x1000, 0x2000}});
  EXPECT_EQ(mem.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubicle::vmm
