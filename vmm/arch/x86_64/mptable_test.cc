#include "vmm/arch/x86_64/mptable.h"

#include <gtest/gtest.h>

#include <cstring>

#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {
namespace {

uint8_t Sum(const uint8_t* p, size_t n) {
  uint8_t s = 0;
  for (size_t i = 0; i < n; ++i) s = static_cast<uint8_t>(s + p[i]);
  return s;
}

size_t EntrySize(uint8_t type) { return type == 0 ? 20 : 8; }

struct Parsed {
  int cpus = 0, bsp = 0, buses = 0, ioapics = 0, intsrcs = 0, lintsrcs = 0;
  std::vector<uint8_t> apic_ids;
  uint8_t ioapic_id = 0;
  uint32_t ioapic_addr = 0;
};

// Parses the table the way Linux's mpparse does, checking every checksum.
Parsed ParseTable(const std::vector<uint8_t>& t, uint64_t base) {
  Parsed p;
  EXPECT_EQ(std::memcmp(t.data(), "_MP_", 4), 0);
  EXPECT_EQ(Sum(t.data(), 16), 0) << "floating pointer checksum";
  uint32_t physptr;
  std::memcpy(&physptr, t.data() + 4, 4);
  size_t off = physptr - base;
  EXPECT_EQ(std::memcmp(t.data() + off, "PCMP", 4), 0);
  uint16_t length;
  std::memcpy(&length, t.data() + off + 4, 2);
  EXPECT_EQ(off + length, t.size());
  EXPECT_EQ(Sum(t.data() + off, length), 0) << "config table checksum";
  uint16_t count;
  std::memcpy(&count, t.data() + off + 34, 2);
  size_t pos = off + 44;
  for (int i = 0; i < count; ++i) {
    uint8_t type = t[pos];
    switch (type) {
      case 0:
        p.cpus++;
        p.apic_ids.push_back(t[pos + 1]);
        if (t[pos + 3] & 2) p.bsp++;
        break;
      case 1: p.buses++; break;
      case 2:
        p.ioapics++;
        p.ioapic_id = t[pos + 1];
        std::memcpy(&p.ioapic_addr, t.data() + pos + 4, 4);
        break;
      case 3: p.intsrcs++; break;
      case 4: p.lintsrcs++; break;
      default: ADD_FAILURE() << "unknown entry type " << int(type);
    }
    pos += EntrySize(type);
  }
  EXPECT_EQ(pos, t.size());
  return p;
}

TEST(MptableTest, ChecksumsAndProcessorCount) {
  for (uint32_t n : {1u, 2u, 4u, 31u, kMaxVcpus}) {
    Result<std::vector<uint8_t>> t = BuildMptable(n, kMptableAddr);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    Parsed p = ParseTable(*t, kMptableAddr);
    EXPECT_EQ(p.cpus, static_cast<int>(n));
    EXPECT_EQ(p.bsp, 1);
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(p.apic_ids[i], i);
    EXPECT_EQ(p.buses, 1);
    EXPECT_EQ(p.ioapics, 1);
    EXPECT_EQ(p.ioapic_id, n);
    EXPECT_EQ(p.ioapic_addr, 0xfec00000u);
    EXPECT_EQ(p.intsrcs, 24);
    EXPECT_EQ(p.lintsrcs, 2);
  }
}

TEST(MptableTest, RefusesTooManyOrZeroVcpus) {
  Result<std::vector<uint8_t>> t = BuildMptable(kMaxVcpus + 1, kMptableAddr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("254"), std::string::npos);
  EXPECT_FALSE(BuildMptable(0, kMptableAddr).ok());
}

TEST(MptableTest, WritesIntoGuestMemory) {
  Result<std::unique_ptr<GuestMemory>> mem = GuestMemory::CreateAnonymous(MemoryRanges(16 * kMiB));
  ASSERT_TRUE(mem.ok());
  ASSERT_TRUE(WriteMptable(**mem, kMaxVcpus).ok());
  Result<std::vector<uint8_t>> expect = BuildMptable(kMaxVcpus, kMptableAddr);
  std::vector<uint8_t> got(expect->size());
  ASSERT_TRUE((*mem)->Read(kMptableAddr, got.data(), got.size()).ok());
  EXPECT_EQ(got, *expect);
}

}  // namespace
}  // namespace kubicle::vmm::arch
