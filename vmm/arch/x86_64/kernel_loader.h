// Loads a guest kernel (ELF vmlinux or bzImage) and an optional initrd into
// guest memory. The kernel file is untrusted input: every header field,
// offset and size is checked with overflow-safe arithmetic before any byte
// is copied, and every failure names the file and the problem.
//
// - ELF64 x86-64 (ET_EXEC): each PT_LOAD segment is copied to its p_paddr
//   (at or above 1 MiB, inside guest RAM) and its bss zeroed. The 64-bit
//   entry is e_entry when it lies inside a loaded segment; a PVH entry is
//   reported from a "Xen" note of type XEN_ELFNOTE_PHYS32_ENTRY (18).
// - bzImage: boot protocol >= 2.12 with XLF_KERNEL_64. The protected-mode
//   part (after the (setup_sects or 4, + 1) * 512 setup bytes) goes to 1 MiB;
//   the 64-bit entry is 1 MiB + 0x200. Its setup header is kept for the zero
//   page.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "vmm/arch/x86_64/boot_params.h"
#include "vmm/arch/x86_64/image_source.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::arch {

inline constexpr uint32_t kXenElfnotePhys32Entry = 18;

enum class KernelFormat { kElf, kBzImage };

struct LoadedKernel {
  KernelFormat format = KernelFormat::kElf;
  // Linux 64-bit boot protocol entry (long mode, RSI = zero page).
  std::optional<uint64_t> entry64;
  // PVH entry (32-bit protected mode, EBX = hvm_start_info).
  std::optional<uint32_t> pvh_entry;
  // Guest-physical range the kernel occupies or will use while it
  // decompresses (bss and, for a bzImage, init_size included).
  uint64_t load_start = 0;
  uint64_t load_end = 0;
  // bzImage only: its setup header, to copy into the zero page.
  std::optional<SetupHeader> setup_header;
};

// Detects the format by content and loads the kernel at path.
Result<LoadedKernel> LoadKernel(const GuestMemory& mem, const std::string& path);
Result<LoadedKernel> LoadKernelImage(const GuestMemory& mem, const ImageSource& image);
// Format-specific loaders (exposed for tests).
Result<LoadedKernel> LoadElf(const GuestMemory& mem, const ImageSource& image);
Result<LoadedKernel> LoadBzImage(const GuestMemory& mem, const ImageSource& image);

struct LoadedInitrd {
  uint64_t addr = 0;
  uint64_t size = 0;
};

// Places the initrd page-aligned at the top of the RAM below 4 GiB (and
// below the kernel's initrd_addr_max for a bzImage), above the kernel.
// ResourceExhausted when it does not fit; InvalidArgument when empty.
Result<LoadedInitrd> LoadInitrd(const GuestMemory& mem, const std::string& path,
                                const LoadedKernel& kernel);
Result<LoadedInitrd> LoadInitrdImage(const GuestMemory& mem, const ImageSource& image,
                                     const LoadedKernel& kernel);

}  // namespace kubicle::vmm::arch
