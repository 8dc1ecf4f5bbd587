// ConfigureBoot end to end on guest memory, without KVM.
#include "vmm/arch/x86_64/boot.h"

#include <gtest/gtest.h>

#include <cstring>

#include "vmm/arch/x86_64/layout.h"
#include "vmm/arch/x86_64/pvh.h"
#include "vmm/arch/x86_64/test_images.h"

namespace kubicle::vmm::arch {
namespace {

using namespace ::kubicle::vmm::arch::test_images;  // NOLINT

class BootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<GuestMemory>> m = GuestMemory::CreateAnonymous(MemoryRanges(64 * kMiB));
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
  }
  void TearDown() override {
    for (const std::string& p : files_) ::unlink(p.c_str());
  }
  std::string File(const std::vector<uint8_t>& bytes) {
    files_.push_back(WriteTempFile(bytes));
    return files_.back();
  }
  std::unique_ptr<GuestMemory> mem_;
  std::vector<std::string> files_;
};

const std::vector<uint8_t> kCode = {0xf4};

TEST_F(BootTest, ElfLinux64WritesAllBootStructures) {
  BootConfig cfg;
  cfg.kernel_path = File(MakeElf({{PT_LOAD, 0x1000000, kCode, 0x1000}}, 0x1000000));
  cfg.initrd_path = File(Pattern(12345));
  cfg.cmdline = "console=ttyS0 panic=1";
  cfg.num_vcpus = 2;
  Result<BootInfo> info = ConfigureBoot(*mem_, cfg);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->mode, EntryMode::kLinux64);
  EXPECT_EQ(info->entry, 0x1000000u);
  ASSERT_TRUE(info->initrd.has_value());

  BootParams bp = *mem_->ReadObj<BootParams>(kZeroPageAddr);
  EXPECT_EQ(+bp.hdr.boot_flag, 0xaa55);
  EXPECT_EQ(+bp.hdr.header, kSetupHeaderMagic);
  EXPECT_EQ(+bp.hdr.cmd_line_ptr, kCmdlineAddr);
  EXPECT_EQ(+bp.hdr.cmdline_size, cfg.cmdline.size() + 1);
  EXPECT_EQ(+bp.hdr.ramdisk_image, info->initrd->addr);
  EXPECT_EQ(+bp.hdr.ramdisk_size, 12345u);
  EXPECT_EQ(+bp.e820_entries, 3);
  char cmdline[64] = {};
  ASSERT_TRUE(mem_->Read(kCmdlineAddr, cmdline, cfg.cmdline.size() + 1).ok());
  EXPECT_EQ(std::string(cmdline), cfg.cmdline);
  EXPECT_EQ(*mem_->ReadObj<uint64_t>(kGdtAddr + 8), BootGdt(EntryMode::kLinux64)[1]);
  EXPECT_EQ(*mem_->ReadObj<uint64_t>(kPml4Addr), kPdptAddr | 3);
  char mp[4];
  ASSERT_TRUE(mem_->Read(kMptableAddr, mp, 4).ok());
  EXPECT_EQ(std::memcmp(mp, "_MP_", 4), 0);
}

TEST_F(BootTest, PvhWhenAskedWritesStartInfo) {
  BootConfig cfg;
  cfg.kernel_path = File(MakeElf(
      {{PT_LOAD, 0x1000000, kCode, 0x1000}, {PT_NOTE, 0, PvhNote(0x1000000), 0}}, 0x1000000));
  cfg.initrd_path = File(Pattern(4096));
  cfg.cmdline = "x";
  cfg.protocol = BootProtocol::kPvh;
  Result<BootInfo> info = ConfigureBoot(*mem_, cfg);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->mode, EntryMode::kPvh);
  HvmStartInfo si = *mem_->ReadObj<HvmStartInfo>(kPvhStartInfoAddr);
  EXPECT_EQ(si.magic, kHvmStartMagic);
  EXPECT_EQ(si.version, 1u);
  EXPECT_EQ(si.cmdline_paddr, kCmdlineAddr);
  EXPECT_EQ(si.memmap_paddr, kPvhMemmapAddr);
  EXPECT_EQ(si.memmap_entries, 3u);
  EXPECT_EQ(si.nr_modules, 1u);
  HvmModlistEntry mod = *mem_->ReadObj<HvmModlistEntry>(si.modlist_paddr);
  EXPECT_EQ(mod.paddr, info->initrd->addr);
  EXPECT_EQ(mod.size, 4096u);
  HvmMemmapEntry last = *mem_->ReadObj<HvmMemmapEntry>(kPvhMemmapAddr + 2 * sizeof(HvmMemmapEntry));
  EXPECT_EQ(last.addr, kHighMemoryStart);
  EXPECT_EQ(last.type, kE820Ram);
  EXPECT_EQ(*mem_->ReadObj<uint64_t>(kGdtAddr + 8), BootGdt(EntryMode::kPvh)[1]);
}

TEST_F(BootTest, AutoPicksPvhOnlyWithoutA64BitEntry) {
  BootConfig cfg;
  cfg.kernel_path = File(MakeElf(
      {{PT_LOAD, 0x1000000, kCode, 0x1000}, {PT_NOTE, 0, PvhNote(0x1000000), 0}}, 0x1000000));
  Result<BootInfo> with64 = ConfigureBoot(*mem_, cfg);
  ASSERT_TRUE(with64.ok());
  EXPECT_EQ(with64->mode, EntryMode::kLinux64);
  cfg.kernel_path = File(MakeElf({{PT_LOAD, 0x1000000, kCode, 0x1000},
                                  {PT_NOTE, 0, PvhNote(0x1000000), 0}},
                                 0xffffffff81000000ull));
  Result<BootInfo> pvh = ConfigureBoot(*mem_, cfg);
  ASSERT_TRUE(pvh.ok());
  EXPECT_EQ(pvh->mode, EntryMode::kPvh);
}

TEST_F(BootTest, PvhAskedWithoutNoteFails) {
  BootConfig cfg;
  cfg.kernel_path = File(MakeElf({{PT_LOAD, 0x1000000, kCode, 0}}, 0x1000000));
  cfg.protocol = BootProtocol::kPvh;
  Result<BootInfo> info = ConfigureBoot(*mem_, cfg);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("no PVH entry"), std::string::npos);
}

TEST_F(BootTest, BzImageCopiesItsHeaderAndLimitsTheCmdline) {
  BootConfig cfg;
  cfg.kernel_path = File(MakeBzImage(Pattern(8192)));
  cfg.cmdline = "console=ttyS0";
  Result<BootInfo> info = ConfigureBoot(*mem_, cfg);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->entry, 0x100200u);
  BootParams bp = *mem_->ReadObj<BootParams>(kZeroPageAddr);
  EXPECT_EQ(+bp.hdr.version, 0x020f);
  EXPECT_EQ(+bp.hdr.setup_sects, 1);
  EXPECT_EQ(+bp.hdr.loadflags, kLoadedHigh | kCanUseHeap);
  EXPECT_EQ(+bp.hdr.type_of_loader, 0xff);

  cfg.cmdline = std::string(2048, 'a');  // header says 2047 max
  EXPECT_FALSE(ConfigureBoot(*mem_, cfg).ok());
}

TEST_F(BootTest, RejectsBadVcpuCounts) {
  BootConfig cfg;
  cfg.kernel_path = File(MakeElf({{PT_LOAD, 0x1000000, kCode, 0}}, 0x1000000));
  cfg.num_vcpus = 0;
  EXPECT_FALSE(ConfigureBoot(*mem_, cfg).ok());
  cfg.num_vcpus = 255;
  EXPECT_FALSE(ConfigureBoot(*mem_, cfg).ok());
  cfg.num_vcpus = 254;
  EXPECT_TRUE(ConfigureBoot(*mem_, cfg).ok());
}

}  // namespace
}  // namespace kubicle::vmm::arch
