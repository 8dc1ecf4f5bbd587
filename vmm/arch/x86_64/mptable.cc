#include "vmm/arch/x86_64/mptable.h"

#include <cstring>
#include <string>

#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {
namespace {

// Structures from the MP spec 1.4 (Linux arch/x86/include/asm/mpspec_def.h).
#pragma pack(push, 1)
struct MpfIntel {  // floating pointer
  char signature[4];
  uint32_t physptr;
  uint8_t length;  // in 16-byte units
  uint8_t specification;
  uint8_t checksum;
  uint8_t feature[5];
};
struct MpcTable {  // configuration table header
  char signature[4];
  uint16_t length;
  uint8_t spec;
  uint8_t checksum;
  char oem[8];
  char productid[12];
  uint32_t oemptr;
  uint16_t oemsize;
  uint16_t oemcount;
  uint32_t lapic;
  uint32_t reserved;
};
struct MpcCpu {
  uint8_t type;
  uint8_t apicid;
  uint8_t apicver;
  uint8_t cpuflag;
  uint32_t cpufeature;
  uint32_t featureflag;
  uint32_t reserved[2];
};
struct MpcBus {
  uint8_t type;
  uint8_t busid;
  char bustype[6];
};
struct MpcIoapic {
  uint8_t type;
  uint8_t apicid;
  uint8_t apicver;
  uint8_t flags;
  uint32_t apicaddr;
};
struct MpcIntsrc {
  uint8_t type;
  uint8_t irqtype;
  uint16_t irqflag;
  uint8_t srcbus;
  uint8_t srcbusirq;
  uint8_t dstapic;
  uint8_t dstirq;
};
using MpcLintsrc = MpcIntsrc;  // same layout: type, irqtype, flags, bus, irq, apic, lint
#pragma pack(pop)
static_assert(sizeof(MpfIntel) == 16 && sizeof(MpcTable) == 44 && sizeof(MpcCpu) == 20);
static_assert(sizeof(MpcBus) == 8 && sizeof(MpcIoapic) == 8 && sizeof(MpcIntsrc) == 8);

enum : uint8_t { kMpProcessor = 0, kMpBus = 1, kMpIoapic = 2, kMpIntsrc = 3, kMpLintsrc = 4 };
enum : uint8_t { kMpInt = 0, kMpNmi = 1, kMpExtInt = 3 };
constexpr uint8_t kCpuEnabled = 1;
constexpr uint8_t kCpuBootProcessor = 2;
constexpr uint8_t kApicVersion = 0x14;
constexpr uint8_t kIoapicVersion = 0x11;
constexpr uint8_t kApicUsable = 1;
constexpr uint32_t kCpuSignature = 0x600;            // family 6
constexpr uint32_t kCpuFeatures = 0x200 | 0x001;     // APIC | FPU

uint8_t Sum(const uint8_t* p, size_t n) {
  uint8_t s = 0;
  for (size_t i = 0; i < n; ++i) s = static_cast<uint8_t>(s + p[i]);
  return s;
}

template <typename T>
void Append(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

}  // namespace

Result<std::vector<uint8_t>> BuildMptable(uint32_t num_cpus, uint64_t base) {
  if (num_cpus == 0 || num_cpus > kMaxVcpus) {
    return Status::InvalidArgument("MP table supports 1 to " + std::to_string(kMaxVcpus) +
                                   " vCPUs, not " + std::to_string(num_cpus));
  }
  const uint8_t ioapic_id = static_cast<uint8_t>(num_cpus);
  std::vector<uint8_t> out(sizeof(MpfIntel) + sizeof(MpcTable));  // headers filled last
  uint16_t entries = 0;
  for (uint32_t i = 0; i < num_cpus; ++i, ++entries) {
    MpcCpu cpu{};
    cpu.type = kMpProcessor;
    cpu.apicid = static_cast<uint8_t>(i);
    cpu.apicver = kApicVersion;
    cpu.cpuflag = kCpuEnabled | (i == 0 ? kCpuBootProcessor : 0);
    cpu.cpufeature = kCpuSignature;
    cpu.featureflag = kCpuFeatures;
    Append(out, cpu);
  }
  MpcBus bus{kMpBus, 0, {'I', 'S', 'A', ' ', ' ', ' '}};
  Append(out, bus);
  MpcIoapic ioapic{kMpIoapic, ioapic_id, kIoapicVersion, kApicUsable,
                   static_cast<uint32_t>(kIoapicAddr)};
  Append(out, ioapic);
  entries += 2;
  for (uint8_t irq = 0; irq <= kLastGsi; ++irq, ++entries) {
    Append(out, MpcIntsrc{kMpIntsrc, kMpInt, 0, 0, irq, ioapic_id, irq});
  }
  Append(out, MpcLintsrc{kMpLintsrc, kMpExtInt, 0, 0, 0, 0, 0});     // LINT0 of the BSP
  Append(out, MpcLintsrc{kMpLintsrc, kMpNmi, 0, 0, 0, 0xff, 1});     // LINT1 of all CPUs
  entries += 2;

  MpcTable table{};
  std::memcpy(table.signature, "PCMP", 4);
  table.length = static_cast<uint16_t>(out.size() - sizeof(MpfIntel));
  table.spec = 4;
  std::memcpy(table.oem, "KUBICLE ", 8);
  std::memcpy(table.productid, "MICROVM     ", 12);
  table.oemcount = entries;
  table.lapic = static_cast<uint32_t>(kLapicAddr);
  std::memcpy(out.data() + sizeof(MpfIntel), &table, sizeof(table));
  out[sizeof(MpfIntel) + offsetof(MpcTable, checksum)] =
      static_cast<uint8_t>(-Sum(out.data() + sizeof(MpfIntel), table.length));

  MpfIntel mpf{};
  std::memcpy(mpf.signature, "_MP_", 4);
  mpf.physptr = static_cast<uint32_t>(base + sizeof(MpfIntel));
  mpf.length = 1;
  mpf.specification = 4;
  mpf.checksum = static_cast<uint8_t>(-Sum(reinterpret_cast<const uint8_t*>(&mpf), sizeof(mpf)));
  std::memcpy(out.data(), &mpf, sizeof(mpf));
  return out;
}

Status WriteMptable(const GuestMemory& mem, uint32_t num_cpus) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> table, BuildMptable(num_cpus, kMptableAddr));
  if (kMptableAddr + table.size() > kHighMemoryStart) {
    return Status::Internal("MP table overruns the reserved area below 1 MiB");
  }
  return mem.Write(kMptableAddr, table.data(), table.size()).WithContext("writing MP table");
}

}  // namespace kubicle::vmm::arch
