#include "vmm/arch/x86_64/pvh.h"

#include <string>
#include <vector>

#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {

Status WritePvhStartInfo(const GuestMemory& mem, std::span<const E820Entry> e820,
                         uint64_t cmdline_addr, const std::optional<LoadedInitrd>& initrd) {
  if (e820.size() > kPvhMemmapMaxEntries) {
    return Status::InvalidArgument("too many memory map entries for PVH: " +
                                   std::to_string(e820.size()));
  }
  std::vector<HvmMemmapEntry> memmap;
  for (const E820Entry& e : e820) memmap.push_back({e.addr, e.size, e.type, 0});
  RETURN_IF_ERROR(mem.Write(kPvhMemmapAddr, memmap.data(), memmap.size() * sizeof(HvmMemmapEntry))
                      .WithContext("writing PVH memory map"));
  HvmStartInfo info{};
  info.magic = kHvmStartMagic;
  info.version = 1;
  info.cmdline_paddr = cmdline_addr;
  info.memmap_paddr = kPvhMemmapAddr;
  info.memmap_entries = static_cast<uint32_t>(memmap.size());
  if (initrd) {
    HvmModlistEntry module{initrd->addr, initrd->size, 0, 0};
    RETURN_IF_ERROR(mem.WriteObj(kPvhModlistAddr, module).WithContext("writing PVH module list"));
    info.nr_modules = 1;
    info.modlist_paddr = kPvhModlistAddr;
  }
  return mem.WriteObj(kPvhStartInfoAddr, info).WithContext("writing PVH start info");
}

}  // namespace kubicle::vmm::arch
