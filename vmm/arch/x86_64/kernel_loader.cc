// bzImage loader, format detection and initrd placement (the ELF loader is
// in elf_loader.cc). Contracts are in kernel_loader.h.
#include "vmm/arch/x86_64/kernel_loader.h"

#include <elf.h>

#include <cstring>
#include <string>

#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {
namespace {

constexpr uint64_t kSectorSize = 512;
constexpr uint64_t kDefaultSetupSects = 4;  // setup_sects == 0 means 4
constexpr uint64_t k64BitEntryOffset = 0x200;
constexpr uint64_t kHeaderMagicOffset = 0x202;
// The setup header ends at 0x202 + the byte at 0x201 (the jump's operand).
constexpr uint64_t kJumpOperandOffset = 0x201;

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Version(uint16_t v) {
  return std::to_string(v >> 8) + "." + (((v & 0xff) < 10) ? "0" : "") + std::to_string(v & 0xff);
}

Status Bad(const ImageSource& image, const std::string& what) {
  return Status::InvalidArgument("bzImage kernel " + image.name() + ": " + what);
}

// Copies only the header bytes the kernel declares; the rest stays zero.
Result<SetupHeader> ReadSetupHeader(const ImageSource& image) {
  uint8_t jump_operand = 0;
  RETURN_IF_ERROR(image.ReadAt(kJumpOperandOffset, &jump_operand, 1));
  uint64_t end = std::min<uint64_t>(kHeaderMagicOffset + jump_operand,
                                    kSetupHeaderOffset + sizeof(SetupHeader));
  SetupHeader hdr{};
  RETURN_IF_ERROR(image.ReadAt(kSetupHeaderOffset, &hdr, end - kSetupHeaderOffset));
  return hdr;
}

// The end of the first RAM range: where a kernel, its decompression buffer
// and the initrd must fit (they are addressed with 32-bit fields).
uint64_t LowRamEnd(const GuestMemory& mem) {
  for (const GuestRegion& r : mem.regions()) {
    if (r.guest_base == 0) return std::min(r.size, kMmioHoleStart);
  }
  return 0;
}

}  // namespace

Result<LoadedKernel> LoadBzImage(const GuestMemory& mem, const ImageSource& image) {
  if (image.size() < kSetupHeaderOffset + sizeof(SetupHeader)) {
    return Bad(image, "truncated: " + std::to_string(image.size()) +
                          " bytes is too short for a setup header");
  }
  uint32_t magic = 0;
  RETURN_IF_ERROR(image.ReadAt(kHeaderMagicOffset, &magic, sizeof(magic)));
  if (magic != kSetupHeaderMagic) return Bad(image, "no \"HdrS\" setup header magic at 0x202");
  ASSIGN_OR_RETURN(SetupHeader hdr, ReadSetupHeader(image));
  if (hdr.version < kMinBootProtocol) {
    return Bad(image, "boot protocol " + Version(hdr.version) + " is older than " +
                          Version(kMinBootProtocol));
  }
  if ((hdr.xloadflags & kXlfKernel64) == 0) {
    return Bad(image, "no 64-bit entry point (XLF_KERNEL_64 not set in xloadflags)");
  }
  if ((hdr.loadflags & kLoadedHigh) == 0) return Bad(image, "is a zImage (LOADED_HIGH not set)");

  uint64_t setup_sects = hdr.setup_sects == 0 ? kDefaultSetupSects : hdr.setup_sects;
  uint64_t setup_bytes = (setup_sects + 1) * kSectorSize;
  if (setup_bytes >= image.size()) {
    return Bad(image, "truncated: no protected-mode kernel after " + std::to_string(setup_bytes) +
                          " setup bytes");
  }
  uint64_t kernel_bytes = image.size() - setup_bytes;
  if (uint64_t{hdr.syssize} * 16 > kernel_bytes) {
    return Bad(image, "truncated: header declares " + std::to_string(uint64_t{hdr.syssize} * 16) +
                          " kernel bytes, file has " + std::to_string(kernel_bytes));
  }
  // The kernel decompresses into [max(load, pref_address), + init_size).
  const uint64_t pref_address = hdr.pref_address;  // copy: no references into packed structs
  uint64_t run_start = std::max<uint64_t>(kKernelLoadAddr, pref_address);
  uint64_t load_end = std::max(kKernelLoadAddr + kernel_bytes, run_start + uint64_t{hdr.init_size});
  if (run_start > kMmioHoleStart || load_end > LowRamEnd(mem)) {
    return Bad(image, "needs guest memory up to " + Hex(load_end) + " but RAM below 4 GiB ends at " +
                          Hex(LowRamEnd(mem)));
  }
  ASSIGN_OR_RETURN(std::span<uint8_t> dst, mem.Slice(kKernelLoadAddr, kernel_bytes));
  RETURN_IF_ERROR(image.ReadAt(setup_bytes, dst.data(), kernel_bytes));

  LoadedKernel k;
  k.format = KernelFormat::kBzImage;
  k.entry64 = kKernelLoadAddr + k64BitEntryOffset;
  k.load_start = kKernelLoadAddr;
  k.load_end = load_end;
  k.setup_header = hdr;
  return k;
}

Result<LoadedKernel> LoadKernelImage(const GuestMemory& mem, const ImageSource& image) {
  uint8_t ident[SELFMAG] = {};
  if (image.size() >= SELFMAG) RETURN_IF_ERROR(image.ReadAt(0, ident, SELFMAG));
  if (std::memcmp(ident, ELFMAG, SELFMAG) == 0) return LoadElf(mem, image);
  uint32_t magic = 0;
  if (image.size() >= kHeaderMagicOffset + 4) {
    RETURN_IF_ERROR(image.ReadAt(kHeaderMagicOffset, &magic, 4));
  }
  if (magic == kSetupHeaderMagic) return LoadBzImage(mem, image);
  return Status::InvalidArgument("kernel " + image.name() + " is neither an ELF nor a bzImage");
}

Result<LoadedKernel> LoadKernel(const GuestMemory& mem, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<FileSource> file, FileSource::Open(path));
  return LoadKernelImage(mem, *file);
}

Result<LoadedInitrd> LoadInitrdImage(const GuestMemory& mem, const ImageSource& image,
                                     const LoadedKernel& kernel) {
  uint64_t size = image.size();
  if (size == 0) return Status::InvalidArgument("initrd " + image.name() + " is empty");
  uint64_t top = LowRamEnd(mem);
  if (kernel.setup_header) {
    // initrd_addr_max is the highest address the initrd's last byte may use.
    top = std::min(top, uint64_t{kernel.setup_header->initrd_addr_max} + 1);
  }
  top &= ~(kPageSize - 1);
  if (size > top || ((top - size) & ~(kPageSize - 1)) < kernel.load_end) {
    return Status::ResourceExhausted("initrd " + image.name() + " (" + std::to_string(size) +
                                     " bytes) does not fit between the kernel end " +
                                     Hex(kernel.load_end) + " and " + Hex(top));
  }
  uint64_t addr = (top - size) & ~(kPageSize - 1);
  ASSIGN_OR_RETURN(std::span<uint8_t> dst, mem.Slice(addr, size));
  RETURN_IF_ERROR(image.ReadAt(0, dst.data(), size));
  return LoadedInitrd{addr, size};
}

Result<LoadedInitrd> LoadInitrd(const GuestMemory& mem, const std::string& path,
                                const LoadedKernel& kernel) {
  ASSIGN_OR_RETURN(std::unique_ptr<FileSource> file, FileSource::Open(path));
  return LoadInitrdImage(mem, *file, kernel);
}

}  // namespace kubicle::vmm::arch
