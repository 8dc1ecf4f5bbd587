#include "vmm/arch/x86_64/cpuid.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kubicle::vmm::arch {
namespace {

kvm_cpuid_entry2 Entry(uint32_t function, uint32_t index = 0, uint32_t flags = 0) {
  kvm_cpuid_entry2 e{};
  e.function = function;
  e.index = index;
  e.flags = flags;
  return e;
}

// A cut-down KVM_GET_SUPPORTED_CPUID of an Intel host: KVM (since 6.2)
// reports only subleaf 0 of leaf 0xB.
std::vector<kvm_cpuid_entry2> IntelSupported() {
  std::vector<kvm_cpuid_entry2> t;
  kvm_cpuid_entry2 leaf0 = Entry(0);
  leaf0.eax = 0x1f;
  std::memcpy(&leaf0.ebx, "Genu", 4);
  std::memcpy(&leaf0.edx, "ineI", 4);
  std::memcpy(&leaf0.ecx, "ntel", 4);
  t.push_back(leaf0);
  kvm_cpuid_entry2 leaf1 = Entry(1);
  leaf1.eax = 0x806f8;
  leaf1.ebx = 0xff000800;  // garbage APIC id from the host
  leaf1.ecx = 0x7ffa3203 | (1u << 15);
  leaf1.edx = 0x0f8bfbff;
  t.push_back(leaf1);
  for (uint32_t i = 0; i < 4; ++i) {
    kvm_cpuid_entry2 cache = Entry(4, i, KVM_CPUID_FLAG_SIGNIFCANT_INDEX);
    cache.eax = ((i < 2 ? 1 : i) << 5) | 0xfc000000 | (0x3f << 14);
    t.push_back(cache);
  }
  t.push_back(Entry(0xb, 0, KVM_CPUID_FLAG_SIGNIFCANT_INDEX));
  t.push_back(Entry(0x1f, 0, KVM_CPUID_FLAG_SIGNIFCANT_INDEX));
  kvm_cpuid_entry2 kvm_sig = Entry(0x40000000);
  kvm_sig.eax = 0x40000001;
  std::memcpy(&kvm_sig.ebx, "KVMKVMKVM\0\0\0", 12);
  t.push_back(kvm_sig);
  kvm_cpuid_entry2 kvm_features = Entry(0x40000001);
  kvm_features.eax = 0x01007afb;
  t.push_back(kvm_features);
  return t;
}

const kvm_cpuid_entry2& Get(const std::vector<kvm_cpuid_entry2>& t, uint32_t f, uint32_t i = 0) {
  const kvm_cpuid_entry2* e = FindCpuid(t, f, i);
  EXPECT_NE(e, nullptr) << "leaf " << std::hex << f << " subleaf " << i;
  static const kvm_cpuid_entry2 kEmpty{};
  return e ? *e : kEmpty;
}

TEST(CpuidTest, ApicIdsDifferPerVcpu) {
  for (uint32_t i = 0; i < 4; ++i) {
    Result<std::vector<kvm_cpuid_entry2>> t = NormalizeCpuid(IntelSupported(), i, 4);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(Get(*t, 1).ebx >> 24, i);
    EXPECT_EQ(Get(*t, 0xb, 0).edx, i);
    EXPECT_EQ(Get(*t, 0xb, 1).edx, i);
    EXPECT_EQ(Get(*t, 0x1f, 0).edx, i);
  }
}

TEST(CpuidTest, Leaf1Features) {
  Result<std::vector<kvm_cpuid_entry2>> t = NormalizeCpuid(IntelSupported(), 0, 3);
  ASSERT_TRUE(t.ok());
  const kvm_cpuid_entry2& l1 = Get(*t, 1);
  EXPECT_TRUE(l1.ecx & kCpuidLeaf1HypervisorBit);
  EXPECT_TRUE(l1.ecx & (1u << 24));    // TSC deadline
  EXPECT_FALSE(l1.ecx & (1u << 15));   // PDCM
  EXPECT_TRUE(l1.edx & (1u << 28));    // HTT
  EXPECT_EQ((l1.ebx >> 16) & 0xff, 4u);  // 3 CPUs -> 4 addressable ids
  EXPECT_EQ((l1.ebx >> 8) & 0xff, 8u);   // CLFLUSH 64 bytes
  EXPECT_EQ(l1.eax, 0x806f8u);           // family/model untouched

  Result<std::vector<kvm_cpuid_entry2>> single = NormalizeCpuid(IntelSupported(), 0, 1);
  ASSERT_TRUE(single.ok());
  EXPECT_FALSE(Get(*single, 1).edx & (1u << 28));
  EXPECT_EQ((Get(*single, 1).ebx >> 16) & 0xff, 1u);
}

TEST(CpuidTest, TopologyIsOneThreadPerCoreAllCoresInOnePackage) {
  Result<std::vector<kvm_cpuid_entry2>> t = NormalizeCpuid(IntelSupported(), 2, 6);
  ASSERT_TRUE(t.ok());
  for (uint32_t leaf : {0xbu, 0x1fu}) {
    const kvm_cpuid_entry2& smt = Get(*t, leaf, 0);
    EXPECT_EQ(smt.eax & 0x1f, 0u);
    EXPECT_EQ(smt.ebx & 0xffff, 1u);
    EXPECT_EQ((smt.ecx >> 8) & 0xff, 1u);  // SMT level
    const kvm_cpuid_entry2& core = Get(*t, leaf, 1);
    EXPECT_EQ(core.eax & 0x1f, 3u);  // 2^3 >= 6
    EXPECT_EQ(core.ebx & 0xffff, 6u);
    EXPECT_EQ((core.ecx >> 8) & 0xff, 2u);  // core level
    EXPECT_EQ(core.ecx & 0xff, 1u);
    const kvm_cpuid_entry2& end = Get(*t, leaf, 2);
    EXPECT_EQ((end.ecx >> 8) & 0xff, 0u);  // invalid level: enumeration stops
    EXPECT_EQ(end.edx, 2u);
  }
  // Leaf 4: cores per package - 1 = 7 (8 addressable), L1/L2 private.
  EXPECT_EQ(Get(*t, 4, 0).eax >> 26, 7u);
  EXPECT_EQ((Get(*t, 4, 0).eax >> 14) & 0xfff, 0u);
  EXPECT_EQ((Get(*t, 4, 3).eax >> 14) & 0xfff, 7u);
}

TEST(CpuidTest, KvmParavirtLeaves) {
  Result<std::vector<kvm_cpuid_entry2>> t = NormalizeCpuid(IntelSupported(), 0, 1);
  ASSERT_TRUE(t.ok());
  const kvm_cpuid_entry2& sig = Get(*t, 0x40000000);
  char name[12];
  std::memcpy(name, &sig.ebx, 4);
  std::memcpy(name + 4, &sig.ecx, 4);
  std::memcpy(name + 8, &sig.edx, 4);
  EXPECT_EQ(std::memcmp(name, "KVMKVMKVM\0\0\0", 12), 0);
  EXPECT_GE(sig.eax, 0x40000001u);
  EXPECT_EQ(Get(*t, 0x40000001).eax, 0x01007afbu);  // as KVM reports

  std::vector<kvm_cpuid_entry2> without = IntelSupported();
  without.resize(without.size() - 2);
  Result<std::vector<kvm_cpuid_entry2>> added = NormalizeCpuid(without, 0, 1);
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(Get(*added, 0x40000000).eax, 0x40000001u);
}

TEST(CpuidTest, AmdTopologyLeaves) {
  std::vector<kvm_cpuid_entry2> t = IntelSupported();
  std::memcpy(&t[0].ebx, "Auth", 4);
  std::memcpy(&t[0].edx, "enti", 4);
  std::memcpy(&t[0].ecx, "cAMD", 4);
  t.push_back(Entry(0x80000008));
  t.push_back(Entry(0x8000001e));
  Result<std::vector<kvm_cpuid_entry2>> n = NormalizeCpuid(t, 3, 4);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(Get(*n, 0x80000008).ecx & 0xff, 3u);
  EXPECT_EQ((Get(*n, 0x80000008).ecx >> 12) & 0xf, 2u);
  EXPECT_EQ(Get(*n, 0x8000001e).eax, 3u);
}

TEST(CpuidTest, RejectsBadTopologyAndMissingLeaves) {
  EXPECT_FALSE(NormalizeCpuid(IntelSupported(), 4, 4).ok());
  EXPECT_FALSE(NormalizeCpuid(IntelSupported(), 0, 0).ok());
  EXPECT_FALSE(NormalizeCpuid(IntelSupported(), 0, 255).ok());
  std::vector<kvm_cpuid_entry2> no_leaf1 = IntelSupported();
  no_leaf1.erase(no_leaf1.begin() + 1);
  EXPECT_FALSE(NormalizeCpuid(no_leaf1, 0, 1).ok());
}

// Leaf 0xD as KVM reports it on this machine's (nested) host: x87, SSE,
// AVX and the three AVX-512 states, with their sizes and offsets.
void AddXsaveLeaves(std::vector<kvm_cpuid_entry2>& t, uint32_t leaf1_ecx, uint32_t leaf7_ebx) {
  const_cast<kvm_cpuid_entry2*>(FindCpuid(t, 1))->ecx = leaf1_ecx;
  kvm_cpuid_entry2 l7 = Entry(7, 0, KVM_CPUID_FLAG_SIGNIFCANT_INDEX);
  l7.ebx = leaf7_ebx;
  t.push_back(l7);
  const uint32_t d[][5] = {{0, 0xe7, 0xa80, 0xa80, 0},   {1, 0xf, 0x9c0, 0x100, 0},
                           {2, 0x100, 0x240, 0, 0},       {5, 0x40, 0x440, 0, 0},
                           {6, 0x200, 0x480, 0, 0},       {7, 0x400, 0x680, 0, 0},
                           {8, 0x80, 0, 1, 0}};
  for (const auto& r : d) {
    kvm_cpuid_entry2 e = Entry(0xd, r[0], KVM_CPUID_FLAG_SIGNIFCANT_INDEX);
    e.eax = r[1];
    e.ebx = r[2];
    e.ecx = r[3];
    e.edx = r[4];
    t.push_back(e);
  }
}

constexpr uint32_t kXsave = 1u << 26, kAvx = 1u << 28, kAvx512f = 1u << 16;

TEST(CpuidTest, XsaveLeafListsOnlyWhatTheGuestCanEnable) {
  struct Case {
    uint32_t leaf1_ecx, leaf7_ebx;
    uint32_t xcr0, size, compacted;
  } cases[] = {
      // This host: AVX-512 states in 0xD but neither AVX nor AVX512F flags.
      // Linux enables x87|SSE (576 bytes); the host said 2688 (and the guest
      // warned "size 832 != kernel_size 576" with YMM left in).
      {kXsave, 0, 0x3, 576, 576},
      {kXsave, kAvx512f, 0x3, 576, 576},  // AVX-512 needs AVX too
      {kXsave | kAvx, 0, 0x7, 832, 832},
      {kXsave | kAvx, kAvx512f, 0xe7, 0xa80, 576 + 256 + 64 + 512 + 1024},
      {kAvx, kAvx512f, 0x3, 576, 576},  // no XSAVE at all
  };
  for (const Case& c : cases) {
    std::vector<kvm_cpuid_entry2> in = IntelSupported();
    AddXsaveLeaves(in, c.leaf1_ecx, c.leaf7_ebx);
    auto t = NormalizeCpuid(in, 0, 1);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    SCOPED_TRACE(::testing::Message() << std::hex << "leaf1 ecx " << c.leaf1_ecx << " leaf7 ebx "
                                      << c.leaf7_ebx);
    const kvm_cpuid_entry2& d0 = Get(*t, 0xd, 0);
    EXPECT_EQ(d0.eax, c.xcr0);
    EXPECT_EQ(d0.edx, 0u);
    EXPECT_EQ(d0.ebx, c.size);
    EXPECT_EQ(d0.ecx, c.size);
    const kvm_cpuid_entry2& d1 = Get(*t, 0xd, 1);
    EXPECT_EQ(d1.eax, 0xfu);  // XSAVEOPT, XSAVEC, XGETBV1, XSAVES kept
    EXPECT_EQ(d1.ebx, c.compacted);
    EXPECT_EQ(d1.ecx, 0u);  // no supervisor states
    for (uint32_t i : {2u, 5u, 6u, 7u, 8u}) {
      const kvm_cpuid_entry2& e = Get(*t, 0xd, i);
      const bool enabled = (c.xcr0 >> i) & 1;
      EXPECT_EQ(e.eax != 0, enabled) << "sub-leaf " << i;
      if (!enabled) {
        EXPECT_EQ(e.eax | e.ebx | e.ecx | e.edx, 0u) << "sub-leaf " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kubicle::vmm::arch
