#include "vmm/arch/x86_64/zero_page.h"

#include <gtest/gtest.h>

#include <cstring>

#include "vmm/arch/x86_64/cmdline.h"
#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {
namespace {

template <typename T>
T At(const std::vector<uint8_t>& page, size_t off) {
  T v;
  std::memcpy(&v, page.data() + off, sizeof(T));
  return v;
}

TEST(E820Test, SmallGuest) {
  std::vector<GuestMemory::Range> ranges = MemoryRanges(256 * kMiB);
  Result<std::vector<E820Entry>> e820 = BuildE820(ranges);
  ASSERT_TRUE(e820.ok()) << e820.status().ToString();
  ASSERT_EQ(e820->size(), 3u);
  EXPECT_EQ(+(*e820)[0].addr, 0u);
  EXPECT_EQ(+(*e820)[0].size, 0x9fc00u);
  EXPECT_EQ(+(*e820)[0].type, kE820Ram);
  EXPECT_EQ(+(*e820)[1].addr, 0x9fc00u);
  EXPECT_EQ(+(*e820)[1].size, 0x100000u - 0x9fc00u);
  EXPECT_EQ(+(*e820)[1].type, kE820Reserved);
  EXPECT_EQ(+(*e820)[2].addr, 0x100000u);
  EXPECT_EQ(+(*e820)[2].size, 256 * kMiB - 0x100000u);
  EXPECT_EQ(+(*e820)[2].type, kE820Ram);
}

TEST(E820Test, LargeGuestSplitsAroundTheHole) {
  std::vector<GuestMemory::Range> ranges = MemoryRanges(6 * kGiB);
  Result<std::vector<E820Entry>> e820 = BuildE820(ranges);
  ASSERT_TRUE(e820.ok());
  ASSERT_EQ(e820->size(), 4u);
  EXPECT_EQ(+(*e820)[2].addr, 0x100000u);
  EXPECT_EQ(+(*e820)[2].addr + (*e820)[2].size, 0xd0000000u);
  EXPECT_EQ(+(*e820)[3].addr, 4 * kGiB);
  EXPECT_EQ(+(*e820)[3].size, 6 * kGiB - 0xd0000000u);
  EXPECT_EQ(+(*e820)[3].type, kE820Ram);
  uint64_t ram = 0;
  for (const E820Entry& e : *e820) ram += e.type == kE820Ram ? e.size : 0;
  EXPECT_EQ(ram, 6 * kGiB - (0x100000u - 0x9fc00u));
}

TEST(E820Test, RejectsRamNotStartingAtZero) {
  std::vector<GuestMemory::Range> ranges = {{0x100000, 64 * kMiB}};
  EXPECT_FALSE(BuildE820(ranges).ok());
  std::vector<GuestMemory::Range> tiny = {{0, 512 * kKiB}};
  EXPECT_FALSE(BuildE820(tiny).ok());
}

TEST(ZeroPageTest, FieldsLandAtDocumentedOffsets) {
  Result<std::unique_ptr<GuestMemory>> mem = GuestMemory::CreateAnonymous(MemoryRanges(64 * kMiB));
  ASSERT_TRUE(mem.ok());
  ZeroPageConfig cfg;
  cfg.cmdline_addr = kCmdlineAddr;
  cfg.cmdline_size = 42;
  cfg.initrd_addr = 0x3c00000;
  cfg.initrd_size = 0x123000;
  cfg.e820 = *BuildE820(MemoryRanges(64 * kMiB));
  Result<BootParams> bp = BuildZeroPage(cfg);
  ASSERT_TRUE(bp.ok()) << bp.status().ToString();
  ASSERT_TRUE(WriteZeroPage(**mem, *bp).ok());

  std::vector<uint8_t> page(4096);
  ASSERT_TRUE((*mem)->Read(kZeroPageAddr, page.data(), page.size()).ok());
  EXPECT_EQ(At<uint8_t>(page, 0x1e8), 3);                 // e820_entries
  EXPECT_EQ(At<uint16_t>(page, 0x1fa), 0xffff);           // vid_mode
  EXPECT_EQ(At<uint16_t>(page, 0x1fe), 0xaa55);           // boot_flag
  EXPECT_EQ(std::memcmp(page.data() + 0x202, "HdrS", 4), 0);
  EXPECT_EQ(At<uint8_t>(page, 0x210), 0xff);              // type_of_loader
  EXPECT_EQ(At<uint8_t>(page, 0x211) & 0x80, 0x80);       // CAN_USE_HEAP
  EXPECT_EQ(At<uint32_t>(page, 0x218), 0x3c00000u);       // ramdisk_image
  EXPECT_EQ(At<uint32_t>(page, 0x21c), 0x123000u);        // ramdisk_size
  EXPECT_NE(At<uint16_t>(page, 0x224), 0);                // heap_end_ptr
  EXPECT_EQ(At<uint32_t>(page, 0x228), 0x20000u);         // cmd_line_ptr
  EXPECT_EQ(At<uint32_t>(page, 0x238), 42u);              // cmdline_size
  EXPECT_EQ(At<uint32_t>(page, 0x0c0), 0u);               // ext_ramdisk_image
  EXPECT_EQ(At<uint32_t>(page, 0x0c8), 0u);               // ext_cmd_line_ptr
  // e820_table[1] at 0x2d0 + 20: reserved [0x9fc00, 1 MiB)
  EXPECT_EQ(At<uint64_t>(page, 0x2d0 + 20), 0x9fc00u);
  EXPECT_EQ(At<uint64_t>(page, 0x2d0 + 28), 0x100000u - 0x9fc00u);
  EXPECT_EQ(At<uint32_t>(page, 0x2d0 + 36), kE820Reserved);
  EXPECT_EQ(At<uint64_t>(page, 0x2d0 + 40), 0x100000u);
  EXPECT_EQ(At<uint32_t>(page, 0x2d0 + 56), kE820Ram);
}

TEST(ZeroPageTest, KeepsTheKernelsOwnHeader) {
  SetupHeader hdr{};
  hdr.setup_sects = 27;
  hdr.version = 0x020f;
  hdr.loadflags = kLoadedHigh;
  hdr.xloadflags = kXlfKernel64;
  hdr.init_size = 0x2000000;
  ZeroPageConfig cfg;
  cfg.kernel_header = hdr;
  cfg.cmdline_addr = kCmdlineAddr;
  cfg.cmdline_size = 1;
  Result<BootParams> bp = BuildZeroPage(cfg);
  ASSERT_TRUE(bp.ok());
  EXPECT_EQ(+bp->hdr.setup_sects, 27);
  EXPECT_EQ(+bp->hdr.version, 0x020f);
  EXPECT_EQ(+bp->hdr.loadflags, kLoadedHigh | kCanUseHeap);
  EXPECT_EQ(+bp->hdr.init_size, 0x2000000u);
  EXPECT_EQ(+bp->hdr.header, kSetupHeaderMagic);
  EXPECT_EQ(+bp->hdr.ramdisk_image, 0u);
}

TEST(ZeroPageTest, RejectsTooManyE820Entries) {
  ZeroPageConfig cfg;
  cfg.e820.resize(129);
  EXPECT_FALSE(BuildZeroPage(cfg).ok());
}

TEST(CmdlineTest, WritesWithNulAndChecksLength) {
  Result<std::unique_ptr<GuestMemory>> mem = GuestMemory::CreateAnonymous(MemoryRanges(16 * kMiB));
  ASSERT_TRUE(mem.ok());
  Result<uint32_t> n = WriteCmdline(**mem, "console=ttyS0 reboot=k", kCmdlineMaxSize - 1);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 23u);
  char buf[23];
  ASSERT_TRUE((*mem)->Read(kCmdlineAddr, buf, sizeof(buf)).ok());
  EXPECT_STREQ(buf, "console=ttyS0 reboot=k");

  EXPECT_FALSE(WriteCmdline(**mem, std::string(kCmdlineMaxSize, 'a'), kCmdlineMaxSize).ok());
  EXPECT_TRUE(WriteCmdline(**mem, std::string(kCmdlineMaxSize - 1, 'a'), kCmdlineMaxSize).ok());
  Status too_long = WriteCmdline(**mem, std::string(2048, 'a'), 2047).status();
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("2047"), std::string::npos);
  EXPECT_FALSE(WriteCmdline(**mem, std::string("a\0b", 3), 100).ok());
}

}  // namespace
}  // namespace kubicle::vmm::arch
