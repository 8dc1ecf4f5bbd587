// ELF64 vmlinux loader (see kernel_loader.h for the contract).
#include <elf.h>

#include <cstring>
#include <string>
#include <vector>

#include "vmm/arch/x86_64/kernel_loader.h"
#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {
namespace {

constexpr uint16_t kMaxProgramHeaders = 256;
constexpr uint64_t kMaxNoteBytes = 64 * kKiB;

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status Bad(const ImageSource& image, const std::string& what) {
  return Status::InvalidArgument("ELF kernel " + image.name() + ": " + what);
}

// true when [off, off + len) lies inside [0, size), without overflow.
bool Within(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

Status CheckHeader(const ImageSource& image, const Elf64_Ehdr& eh) {
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return Bad(image, "not a 64-bit ELF (ELFCLASS64)");
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return Bad(image, "not little-endian");
  if (eh.e_machine != EM_X86_64) {
    return Bad(image, "machine " + std::to_string(eh.e_machine) + " is not x86-64 (EM_X86_64)");
  }
  if (eh.e_type != ET_EXEC) return Bad(image, "type " + std::to_string(eh.e_type) + " is not ET_EXEC");
  if (eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return Bad(image, "program header size " + std::to_string(eh.e_phentsize) + " is not " +
                          std::to_string(sizeof(Elf64_Phdr)));
  }
  if (eh.e_phnum == 0) return Bad(image, "has no program headers");
  if (eh.e_phnum > kMaxProgramHeaders) {
    return Bad(image, "too many program headers (" + std::to_string(eh.e_phnum) + ")");
  }
  uint64_t ph_bytes = uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr);
  if (!Within(eh.e_phoff, ph_bytes, image.size())) {
    return Bad(image, "program headers at offset " + Hex(eh.e_phoff) + " lie beyond the file");
  }
  return Status::Ok();
}

Status LoadSegment(const GuestMemory& mem, const ImageSource& image, const Elf64_Phdr& ph,
                   size_t index) {
  std::string seg = "segment " + std::to_string(index);
  if (ph.p_filesz > ph.p_memsz) return Bad(image, seg + " has filesz larger than memsz");
  if (!Within(ph.p_offset, ph.p_filesz, image.size())) {
    return Bad(image, seg + " file range " + Hex(ph.p_offset) + "+" + Hex(ph.p_filesz) +
                          " lies beyond the file");
  }
  if (ph.p_paddr + ph.p_memsz < ph.p_paddr) return Bad(image, seg + " address range overflows");
  if (ph.p_paddr < kHighMemoryStart) {
    return Bad(image, seg + " at " + Hex(ph.p_paddr) +
                          " is below 1 MiB, where the boot structures live");
  }
  if (!mem.IsValidRange(ph.p_paddr, ph.p_memsz)) {
    return Bad(image, seg + " [" + Hex(ph.p_paddr) + ", " + Hex(ph.p_paddr + ph.p_memsz) +
                          ") is outside guest memory");
  }
  ASSIGN_OR_RETURN(std::span<uint8_t> dst, mem.Slice(ph.p_paddr, ph.p_memsz));
  RETURN_IF_ERROR(image.ReadAt(ph.p_offset, dst.data(), ph.p_filesz));
  std::memset(dst.data() + ph.p_filesz, 0, ph.p_memsz - ph.p_filesz);
  return Status::Ok();
}

// Scans one PT_NOTE segment for the PVH entry note.
Result<std::optional<uint32_t>> FindPvhNote(const ImageSource& image, const Elf64_Phdr& ph) {
  if (!Within(ph.p_offset, ph.p_filesz, image.size())) {
    return Bad(image, "note segment lies beyond the file");
  }
  std::vector<uint8_t> notes(std::min<uint64_t>(ph.p_filesz, kMaxNoteBytes));
  RETURN_IF_ERROR(image.ReadAt(ph.p_offset, notes.data(), notes.size()));
  uint64_t pos = 0;
  while (notes.size() - pos >= sizeof(Elf64_Nhdr)) {
    Elf64_Nhdr nh;
    std::memcpy(&nh, notes.data() + pos, sizeof(nh));
    uint64_t name_off = pos + sizeof(nh);
    uint64_t name_len = (uint64_t{nh.n_namesz} + 3) & ~uint64_t{3};
    uint64_t desc_len = (uint64_t{nh.n_descsz} + 3) & ~uint64_t{3};
    if (!Within(name_off, name_len, notes.size()) ||
        !Within(name_off + name_len, desc_len, notes.size())) {
      return Bad(image, "note runs past the end of its segment");
    }
    uint64_t desc_off = name_off + name_len;
    if (nh.n_type == kXenElfnotePhys32Entry && nh.n_namesz == 4 &&
        std::memcmp(notes.data() + name_off, "Xen", 4) == 0) {
      if (nh.n_descsz != 4 && nh.n_descsz != 8) return Bad(image, "PVH entry note has a bad size");
      uint64_t entry = 0;
      std::memcpy(&entry, notes.data() + desc_off, nh.n_descsz);
      if (entry >= (uint64_t{1} << 32)) return Bad(image, "PVH entry " + Hex(entry) + " is above 4 GiB");
      return std::optional<uint32_t>(static_cast<uint32_t>(entry));
    }
    pos = desc_off + desc_len;
  }
  return std::optional<uint32_t>();
}

bool InsideLoaded(const std::vector<Elf64_Phdr>& loads, uint64_t addr) {
  for (const Elf64_Phdr& ph : loads) {
    if (addr >= ph.p_paddr && addr - ph.p_paddr < ph.p_memsz) return true;
  }
  return false;
}

}  // namespace

Result<LoadedKernel> LoadElf(const GuestMemory& mem, const ImageSource& image) {
  if (image.size() < sizeof(Elf64_Ehdr)) return Bad(image, "truncated ELF header");
  Elf64_Ehdr eh;
  RETURN_IF_ERROR(image.ReadAt(0, &eh, sizeof(eh)));
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return Bad(image, "no ELF magic");
  RETURN_IF_ERROR(CheckHeader(image, eh));
  std::vector<Elf64_Phdr> phdrs(eh.e_phnum);
  RETURN_IF_ERROR(image.ReadAt(eh.e_phoff, phdrs.data(), phdrs.size() * sizeof(Elf64_Phdr)));

  LoadedKernel k;
  k.format = KernelFormat::kElf;
  k.load_start = UINT64_MAX;
  std::vector<Elf64_Phdr> loads;
  for (size_t i = 0; i < phdrs.size(); ++i) {
    const Elf64_Phdr& ph = phdrs[i];
    if (ph.p_type == PT_NOTE && !k.pvh_entry) {
      ASSIGN_OR_RETURN(k.pvh_entry, FindPvhNote(image, ph));
    }
    if (ph.p_type != PT_LOAD || ph.p_memsz == 0) continue;
    RETURN_IF_ERROR(LoadSegment(mem, image, ph, i));
    loads.push_back(ph);
    k.load_start = std::min(k.load_start, ph.p_paddr);
    k.load_end = std::max(k.load_end, ph.p_paddr + ph.p_memsz);
  }
  if (loads.empty()) return Bad(image, "has no loadable (PT_LOAD) segments");
  if (InsideLoaded(loads, eh.e_entry)) k.entry64 = eh.e_entry;
  if (k.pvh_entry && !InsideLoaded(loads, *k.pvh_entry)) {
    return Bad(image, "PVH entry " + Hex(*k.pvh_entry) + " is outside the loaded segments");
  }
  if (!k.entry64 && !k.pvh_entry) {
    return Bad(image, "entry point " + Hex(eh.e_entry) +
                          " is outside the loaded segments and there is no PVH note");
  }
  return k;
}

}  // namespace kubicle::vmm::arch
