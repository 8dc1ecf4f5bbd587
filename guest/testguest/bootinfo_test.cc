#include "guest/testguest/bootinfo.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "guest/protocol/wire.h"

namespace kubicle::guest::testguest {
namespace {

namespace wire = ::kubicle::guest::protocol;

uint32_t Parse(const std::string& s, VirtioMmioDevice* out, uint32_t max = 8) {
  return ParseVirtioMmioDevices(s.data(), uint32_t(s.size()), out, max);
}

TEST(BootInfo, ParsesVirtioMmioDevices) {
  VirtioMmioDevice d[8];
  const std::string cmd =
      "console=ttyS0 reboot=k virtio_mmio.device=4K@0xd0000000:5 panic=1 "
      "virtio_mmio.device=0x1000@0xd0001000:6:2 virtio_mmio.device=512@4026531840:12";
  ASSERT_EQ(Parse(cmd, d), 3u);
  EXPECT_EQ(d[0].base, 0xd0000000u);
  EXPECT_EQ(d[0].size, 4096u);
  EXPECT_EQ(d[0].irq, 5u);
  EXPECT_EQ(d[1].base, 0xd0001000u);
  EXPECT_EQ(d[1].irq, 6u);
  EXPECT_EQ(d[2].base, 4026531840u);
  EXPECT_EQ(d[2].size, 512u);
  EXPECT_EQ(Parse(cmd, d, 1), 1u);
}

TEST(BootInfo, SkipsMalformedDeviceEntries) {
  VirtioMmioDevice d[8];
  EXPECT_EQ(Parse("virtio_mmio.device=4K@0xd0000000", d), 0u);         // no irq
  EXPECT_EQ(Parse("virtio_mmio.device=4K0xd0000000:5", d), 0u);        // no @
  EXPECT_EQ(Parse("virtio_mmio.device=4K@0xzz:5", d), 0u);
  EXPECT_EQ(Parse("virtio_mmio.device=4K@0xd0000000:5x", d), 0u);      // trailing junk
  EXPECT_EQ(Parse("virtio_mmio.device=99999999999999999999@0:5", d), 0u);  // overflow
  EXPECT_EQ(Parse("virtio_mmio.device=16G@0xffffffffffffffff:5", d), 0u);  // wraps
  EXPECT_EQ(Parse("virtio_mmio.device=", d), 0u);
  EXPECT_EQ(Parse("xvirtio_mmio.device=4K@0x1000:5", d), 0u);
  // A NUL ends the command line.
  std::string with_nul = "a\0virtio_mmio.device=4K@0x1000:5";
  with_nul[1] = '\0';
  EXPECT_EQ(Parse(with_nul, d), 0u);
}

TEST(BootInfo, ReadsZeroPageE820) {
  std::vector<uint8_t> zp(4096, 0);
  zp[0x1e8] = 2;
  wire::StoreLe64(&zp[0x2d0], 0);
  wire::StoreLe64(&zp[0x2d0 + 8], 0x9fc00);
  wire::StoreLe32(&zp[0x2d0 + 16], 1);
  wire::StoreLe64(&zp[0x2d0 + 20], 0x100000);
  wire::StoreLe64(&zp[0x2d0 + 28], 255ull << 20);
  wire::StoreLe32(&zp[0x2d0 + 36], 1);
  E820Entry e[4];
  ASSERT_EQ(ReadZeroPageE820(zp.data(), e, 4), 2u);
  EXPECT_EQ(e[1].addr, 0x100000u);
  EXPECT_EQ(e[1].size, 255ull << 20);
  EXPECT_EQ(ReadZeroPageE820(zp.data(), e, 1), 1u);
}

// 1 MiB of fake low memory holding a Firecracker-style MP table.
std::vector<uint8_t> g_mem;
const uint8_t* Reader(uint64_t addr, uint32_t len) {
  if (addr + len > g_mem.size()) return nullptr;
  return g_mem.data() + addr;
}

void Fix(uint8_t* p, uint32_t len, uint32_t checksum_at) {
  p[checksum_at] = 0;
  uint8_t sum = 0;
  for (uint32_t i = 0; i < len; ++i) sum = uint8_t(sum + p[i]);
  p[checksum_at] = uint8_t(-sum);
}

void BuildMpTable(int cpus) {
  g_mem.assign(1 << 20, 0);
  uint8_t* fp = &g_mem[0x9fc00];
  std::memcpy(fp, "_MP_", 4);
  wire::StoreLe32(fp + 4, 0x9fc10);
  fp[8] = 1;
  fp[9] = 4;
  Fix(fp, 16, 10);
  uint8_t* t = &g_mem[0x9fc10];
  std::memcpy(t, "PCMP", 4);
  wire::StoreLe32(t + 36, 0xfee00000);
  uint32_t off = 44;
  uint16_t entries = 0;
  for (int i = 0; i < cpus; ++i, ++entries) {
    t[off] = 0;
    t[off + 1] = uint8_t(i);
    t[off + 3] = uint8_t(1 | (i == 0 ? 2 : 0));
    off += 20;
  }
  t[off] = 1;  // bus
  off += 8;
  t[off] = 2;  // ioapic
  off += 8;
  entries += 2;
  wire::StoreLe16(t + 4, uint16_t(off));
  wire::StoreLe16(t + 34, entries);
  Fix(t, off, 7);
}

TEST(BootInfo, ParsesFirecrackerStyleMpTable) {
  BuildMpTable(4);
  MpInfo info;
  ASSERT_TRUE(ParseMpTable(Reader, &info)) << info.error;
  EXPECT_EQ(info.cpu_count, 4u);
  EXPECT_EQ(info.bsp_apic_id, 0);
  EXPECT_EQ(info.apic_ids[3], 3);
  EXPECT_EQ(info.lapic_address, 0xfee00000u);
}

TEST(BootInfo, MpEntriesAreWalkedByLengthNotCount) {
  BuildMpTable(2);
  wire::StoreLe16(&g_mem[0x9fc10 + 34], 0);  // qboot leaves the count at 0
  Fix(&g_mem[0x9fc10], wire::LoadLe16(&g_mem[0x9fc10 + 4]), 7);
  MpInfo info;
  ASSERT_TRUE(ParseMpTable(Reader, &info)) << info.error;
  EXPECT_EQ(info.cpu_count, 2u);
}

TEST(BootInfo, RejectsBrokenMpTables) {
  BuildMpTable(2);
  g_mem[0x9fc10 + 50] ^= 1;  // config checksum now wrong
  MpInfo a;
  EXPECT_FALSE(ParseMpTable(Reader, &a));
  EXPECT_NE(a.error, nullptr);

  BuildMpTable(2);
  wire::StoreLe16(&g_mem[0x9fc10 + 4], 0xffff);  // length runs past memory
  Fix(&g_mem[0x9fc00], 16, 10);
  MpInfo b;
  EXPECT_FALSE(ParseMpTable(Reader, &b));

  g_mem.assign(1 << 20, 0);
  MpInfo c;
  EXPECT_FALSE(ParseMpTable(Reader, &c));
  EXPECT_STREQ(c.error, "no MP floating pointer");
}

}  // namespace
}  // namespace kubicle::guest::testguest
