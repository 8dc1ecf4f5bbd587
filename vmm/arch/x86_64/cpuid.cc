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
  EnsureKvmLeaves(t);
  return t;
}

}  // namespace kubicle::vmm::arch
