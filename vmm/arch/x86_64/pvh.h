// PVH boot information (Xen's struct hvm_start_info, version 1, as in
// xen/include/public/arch-x86/hvm/start_info.h): what a kernel entered
// through its XEN_ELFNOTE_PHYS32_ENTRY reads via EBX. Written at
// kPvhStartInfoAddr with the memory map (e820 types) at kPvhMemmapAddr and
// the initrd, if any, as module 0 at kPvhModlistAddr.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "common/status.h"
#include "vmm/arch/x86_64/boot_params.h"
#include "vmm/arch/x86_64/kernel_loader.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::arch {

inline constexpr uint32_t kHvmStartMagic = 0x336ec578;

struct HvmStartInfo {
  uint32_t magic;
  uint32_t version;
  uint32_t flags;
  uint32_t nr_modules;
  uint64_t modlist_paddr;
  uint64_t cmdline_paddr;
  uint64_t rsdp_paddr;
  uint64_t memmap_paddr;
  uint32_t memmap_entries;
  uint32_t reserved;
};
static_assert(sizeof(HvmStartInfo) == 56);

struct HvmModlistEntry {
  uint64_t paddr;
  uint64_t size;
  uint64_t cmdline_paddr;
  uint64_t reserved;
};
static_assert(sizeof(HvmModlistEntry) == 32);

struct HvmMemmapEntry {
  uint64_t addr;
  uint64_t size;
  uint32_t type;
  uint32_t reserved;
};
static_assert(sizeof(HvmMemmapEntry) == 24);

Status WritePvhStartInfo(const GuestMemory& mem, std::span<const E820Entry> e820,
                         uint64_t cmdline_addr, const std::optional<LoadedInitrd>& initrd);

}  // namespace kubicle::vmm::arch
