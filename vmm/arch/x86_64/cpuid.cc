#include "vmm/arch/x86_64/cpuid.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "vmm/arch/x86_64/mptable.h"

namespace kubicle::vmm::arch {
namespace {

constexpr uint32_t kLeaf1EcxPdcm = 1u << 15;
constexpr uint32_t kLeaf1EcxTscDeadline = 1u << 24;
constexpr uint32_t kLeaf1EdxHtt = 1u << 28;
constexpr uint32_t kLevelTypeSmt = 1;
constexpr uint32_t kLevelTypeCore = 2;

kvm_cpuid_entry2* Find(std::vector<kvm_cpuid_entry2>& t, uint32_t function, uint32_t index = 0) {
  return const_cast<kvm_cpuid_entry2*>(FindCpuid(t, function, index));
}

void SetBits(uint32_t& reg, int lo, int hi, uint32_t value) {
  uint32_t width = static_cast<uint32_t>(hi - lo + 1);
  uint32_t mask = (width == 32 ? ~0u : ((1u << width) - 1)) << lo;
  reg = (reg & ~mask) | ((value << lo) & mask);
}

// Smallest s with 2^s >= n.
uint32_t CeilLog2(uint32_t n) {
  uint32_t s = 0;
  while ((1u << s) < n) ++s;
  return s;
}

bool IsAmd(const std::vector<kvm_cpuid_entry2>& t) {
  const kvm_cpuid_entry2* leaf0 = FindCpuid(t, 0);
  // "AuthenticAMD" as EBX, EDX, ECX.
  return leaf0 && leaf0->ebx == 0x68747541 && leaf0->edx == 0x69746e65 && leaf0->ecx == 0x444d4163;
}

void UpdateLeaf1(kvm_cpuid_entry2& e, uint32_t index, uint32_t n) {
  SetBits(e.ebx, 8, 15, 8);  // CLFLUSH line size in 8-byte units
  SetBits(e.ebx, 16, 23, std::min(1u << CeilLog2(n), 255u));
  SetBits(e.ebx, 24, 31, index);
  e.ecx &= ~kLeaf1EcxPdcm;
  e.ecx |= kLeaf1EcxTscDeadline | kCpuidLeaf1HypervisorBit;
  if (n > 1) {
    e.edx |= kLeaf1EdxHtt;
  } else {
    e.edx &= ~kLeaf1EdxHtt;
  }
}

// Rewrites an extended topology leaf (0xB or 0x1F): subleaf 0 = SMT level
// (1 thread per core), 1 = core level (n cores), 2 = terminator.
void UpdateTopologyLeaf(std::vector<kvm_cpuid_entry2>& t, uint32_t function, uint32_t index,
                        uint32_t n) {
  t.erase(std::remove_if(t.begin(), t.end(),
                         [&](const kvm_cpuid_entry2& e) { return e.function == function; }),
          t.end());
  for (uint32_t sub = 0; sub <= 2; ++sub) {
    kvm_cpuid_entry2 e{};
    e.function = function;
    e.index = sub;
    e.flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX;
    e.edx = index;  // x2APIC id
    SetBits(e.ecx, 0, 7, sub);
    if (sub == 0) {
      e.eax = 0;  // no bits for threads: one per core
      e.ebx = 1;
      SetBits(e.ecx, 8, 15, kLevelTypeSmt);
    } else if (sub == 1) {
      e.eax = CeilLog2(n);
      e.ebx = n;
      SetBits(e.ecx, 8, 15, kLevelTypeCore);
    }
    t.push_back(e);
  }
}

void UpdateIntelCacheLeaf(std::vector<kvm_cpuid_entry2>& t, uint32_t n) {
  uint32_t ids = (1u << CeilLog2(n)) - 1;
  for (kvm_cpuid_entry2& e : t) {
    if (e.function != 4) continue;
    uint32_t level = (e.eax >> 5) & 0x7;
    if (level == 0) continue;  // no more caches
    SetBits(e.eax, 26, 31, std::min(ids, 63u));                      // cores per package - 1
    SetBits(e.eax, 14, 25, level >= 3 ? std::min(ids, 4095u) : 0);  // sharing this cache - 1
  }
}

void UpdateAmdLeaves(std::vector<kvm_cpuid_entry2>& t, uint32_t index, uint32_t n) {
  if (kvm_cpuid_entry2* e = Find(t, 0x80000008)) {
    SetBits(e->ecx, 0, 7, n - 1);             // NC: cores - 1
    SetBits(e->ecx, 12, 15, CeilLog2(n));     // ApicIdCoreIdSize
  }
  if (kvm_cpuid_entry2* e = Find(t, 0x8000001e)) {
    e->eax = index;  // extended APIC id
    e->ebx = index;  // compute unit id; threads per unit - 1 = 0
    e->ecx = 0;      // node 0, one node per processor
  }
}

// XSAVE state components (XCR0 bits) and the CPUID feature each needs.
constexpr uint32_t kLeaf1EcxXsave = 1u << 26;
constexpr uint32_t kLeaf1EcxAvx = 1u << 28;
constexpr uint32_t kLeaf7EbxMpx = 1u << 14;
constexpr uint32_t kLeaf7EbxAvx512f = 1u << 16;
constexpr uint32_t kLeaf7EcxPku = 1u << 3;
constexpr uint32_t kLeaf7EdxAmxTile = 1u << 24;
constexpr uint32_t kXsaveLegacyAndHeader = 512 + 64;
constexpr uint32_t kXsaveCompactedBits = (1u << 1) | (1u << 3);  // 0xD.1 EAX: XSAVEC, XSAVES

// The user state components (XCR0) the guest may enable: what KVM supports
// (0xD.0 EDX:EAX), x87 and SSE always, every other component only with the
// feature flag a kernel checks before enabling it (Linux clears YMM without
// AVX, the AVX-512 states without AVX512F, ...). Advertising a component the
// guest then leaves disabled makes the sizes below disagree with its XCR0.
uint64_t UsableXcr0(const std::vector<kvm_cpuid_entry2>& t, const kvm_cpuid_entry2& d0) {
  const uint64_t supported = d0.eax | (uint64_t{d0.edx} << 32);
  const kvm_cpuid_entry2* l1 = FindCpuid(t, 1);
  const kvm_cpuid_entry2* l7 = FindCpuid(t, 7, 0);
  const uint32_t ecx1 = l1 ? l1->ecx : 0;
  const uint32_t ebx7 = l7 ? l7->ebx : 0, ecx7 = l7 ? l7->ecx : 0, edx7 = l7 ? l7->edx : 0;
  uint64_t mask = 0x3;  // x87, SSE
  if (ecx1 & kLeaf1EcxAvx) mask |= 1u << 2;
  if (ebx7 & kLeaf7EbxMpx) mask |= (1u << 3) | (1u << 4);
  if ((ebx7 & kLeaf7EbxAvx512f) && (ecx1 & kLeaf1EcxAvx)) mask |= (1u << 5) | (1u << 6) | (1u << 7);
  if (ecx7 & kLeaf7EcxPku) mask |= 1u << 9;
  if (edx7 & kLeaf7EdxAmxTile) mask |= (1u << 17) | (1u << 18);
  return supported & mask;
}

// Makes leaf 0xD agree with the components the guest can enable: sub-leaf 0
// lists them (EDX:EAX) with the size of their XSAVE area in EBX (the guest
// enables all of them) and ECX; sub-leaf 1's compacted size covers them (no
// supervisor states: XSS is 0); sub-leaves of other components read zero.
// Without XSAVE in leaf 1 only x87 and SSE remain.
void UpdateXsaveLeaf(std::vector<kvm_cpuid_entry2>& t) {
  kvm_cpuid_entry2* d0 = Find(t, 0xd, 0);
  if (d0 == nullptr) return;
  const kvm_cpuid_entry2* l1 = FindCpuid(t, 1);
  const uint64_t xcr0 = (l1 && (l1->ecx & kLeaf1EcxXsave)) ? UsableXcr0(t, *d0) : 0x3;
  uint32_t standard = kXsaveLegacyAndHeader, compacted = kXsaveLegacyAndHeader;
  for (kvm_cpuid_entry2& e : t) {
    if (e.function != 0xd || e.index < 2) continue;
    if (e.index >= 64 || !(xcr0 & (uint64_t{1} << e.index))) {
      e.eax = e.ebx = e.ecx = e.edx = 0;
      continue;
    }
    standard = std::max(standard, e.ebx + e.eax);  // offset + size
    if (e.ecx & 2) compacted = (compacted + 63) & ~63u;  // 64-byte aligned in compacted form
    compacted += e.eax;
  }
  d0->eax = static_cast<uint32_t>(xcr0);
  d0->edx = static_cast<uint32_t>(xcr0 >> 32);
  d0->ebx = standard;
  d0->ecx = standard;
  if (kvm_cpuid_entry2* d1 = Find(t, 0xd, 1)) {
    d1->ebx = (d1->eax & kXsaveCompactedBits) ? compacted : 0;
    d1->ecx = d1->edx = 0;
  }
}

void EnsureKvmLeaves(std::vector<kvm_cpuid_entry2>& t) {
  kvm_cpuid_entry2* sig = Find(t, kKvmCpuidSignatureLeaf);
  if (sig == nullptr) {
    t.push_back(kvm_cpuid_entry2{});
    sig = &t.back();
    sig->function = kKvmCpuidSignatureLeaf;
  }
  std::memcpy(&sig->ebx, "KVMK", 4);
  std::memcpy(&sig->ecx, "VMKV", 4);
  std::memcpy(&sig->edx, "M\0\0\0", 4);
  sig->eax = std::max(sig->eax, kKvmCpuidFeaturesLeaf);
  if (Find(t, kKvmCpuidFeaturesLeaf) == nullptr) {
    kvm_cpuid_entry2 features{};
    features.function = kKvmCpuidFeaturesLeaf;
    t.push_back(features);
  }
}

}  // namespace

const kvm_cpuid_entry2* FindCpuid(const std::vector<kvm_cpuid_entry2>& table, uint32_t function,
                                  uint32_t index) {
  for (const kvm_cpuid_entry2& e : table) {
    if (e.function != function) continue;
    if ((e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX) && e.index != index) continue;
    return &e;
  }
  return nullptr;
}

Result<std::vector<kvm_cpuid_entry2>> NormalizeCpuid(std::vector<kvm_cpuid_entry2> t,
                                                     uint32_t vcpu_index, uint32_t num_vcpus) {
  if (num_vcpus == 0 || num_vcpus > kMaxVcpus || vcpu_index >= num_vcpus) {
    return Status::InvalidArgument("vCPU " + std::to_string(vcpu_index) + " of " +
                                   std::to_string(num_vcpus) + " is not a valid CPU topology");
  }
  const kvm_cpuid_entry2* leaf0 = FindCpuid(t, 0);
  kvm_cpuid_entry2* leaf1 = Find(t, 1);
  if (leaf0 == nullptr || leaf1 == nullptr) {
    return Status::InvalidArgument("supported CPUID lacks leaf 0 or leaf 1");
  }
  uint32_t max_basic = leaf0->eax;
  UpdateLeaf1(*leaf1, vcpu_index, num_vcpus);
  if (max_basic >= 0xb) UpdateTopologyLeaf(t, 0xb, vcpu_index, num_vcpus);
  if (max_basic >= 0x1f && FindCpuid(t, 0x1f) != nullptr) {
    UpdateTopologyLeaf(t, 0x1f, vcpu_index, num_vcpus);
  }
  if (IsAmd(t)) {
    UpdateAmdLeaves(t, vcpu_index, num_vcpus);
  } else {
    UpdateIntelCacheLeaf(t, num_vcpus);
  }
  if (max_basic >= 0xd) UpdateXsaveLeaf(t);
  EnsureKvmLeaves(t);
  return t;
}

}  // namespace kubicle::vmm::arch
