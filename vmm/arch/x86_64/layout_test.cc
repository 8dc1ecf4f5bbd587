#include "vmm/arch/x86_64/layout.h"

#include <gtest/gtest.h>

namespace kubicle::vmm::arch {
namespace {

TEST(LayoutTest, BootStructuresDoNotOverlap) {
  EXPECT_LE(kGdtAddr + 4 * 8, kIdtAddr);
  EXPECT_LE(kPvhMemmapAddr + kPvhMemmapMaxEntries * 24, kZeroPageAddr);
  EXPECT_LE(kZeroPageAddr + 4096, kBootStackPointer);
  EXPECT_LE(kBootStackPointer, kPml4Addr);
  EXPECT_LE(kPdAddr + 4096, kCmdlineAddr);
  EXPECT_LE(kCmdlineAddr + kCmdlineMaxSize, kMptableAddr);
  EXPECT_LT(kMptableAddr, kKernelLoadAddr);
  EXPECT_EQ(MmioDeviceAddr(0), 0xd0000000u);
  EXPECT_EQ(MmioDeviceAddr(1), 0xd0001000u);
  EXPECT_EQ(MmioDeviceGsi(0), 5u);
  EXPECT_EQ(MmioDeviceGsi(kMaxMmioDevices - 1), 23u);
  EXPECT_LT(MmioDeviceAddr(kMaxMmioDevices), kIoapicAddr);
}

TEST(LayoutTest, SmallMemoryIsOneRange) {
  std::vector<GuestMemory::Range> r = MemoryRanges(256 * kMiB);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].base, 0u);
  EXPECT_EQ(r[0].size, 256 * kMiB);
}

TEST(LayoutTest, MemoryUpToTheHoleIsOneRange) {
  std::vector<GuestMemory::Range> r = MemoryRanges(kMmioHoleStart);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].size, kMmioHoleStart);
}

TEST(LayoutTest, LargeMemorySplitsAroundTheHole) {
  std::vector<GuestMemory::Range> r = MemoryRanges(6 * kGiB);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].base, 0u);
  EXPECT_EQ(r[0].size, 0xd0000000u);
  EXPECT_EQ(r[1].base, 4 * kGiB);
  EXPECT_EQ(r[1].size, 6 * kGiB - 0xd0000000u);
  EXPECT_EQ(r[0].size + r[1].size, 6 * kGiB);
}

TEST(LayoutTest, MemorySizeValidation) {
  EXPECT_TRUE(ValidateMemorySize(256 * kMiB).ok());
  EXPECT_TRUE(ValidateMemorySize(kMinMemoryBytes).ok());
  EXPECT_TRUE(ValidateMemorySize(kMaxMemoryBytes).ok());

  Status unaligned = ValidateMemorySize(256 * kMiB + 100);
  EXPECT_EQ(unaligned.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unaligned.message().find("multiple of 4 KiB"), std::string::npos);

  Status small = ValidateMemorySize(8 * kMiB);
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("minimum of 16 MiB"), std::string::npos) << small.message();

  Status zero = ValidateMemorySize(0);
  EXPECT_FALSE(zero.ok());

  Status big = ValidateMemorySize(kMaxMemoryBytes + kPageSize);
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("maximum"), std::string::npos);
}

}  // namespace
}  // namespace kubicle::vmm::arch
