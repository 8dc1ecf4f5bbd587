// Test-only builders of synthetic kernel images (ELF64 and bzImage) shared
// by the loader, boot and KVM boot tests.
#pragma once

#include <elf.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "vmm/arch/x86_64/boot_params.h"
#include "vmm/arch/x86_64/kernel_loader.h"

namespace kubicle::vmm::arch::test_images {

struct Segment {
  uint32_t type = PT_LOAD;
  uint64_t paddr = 0;
  std::vector<uint8_t> data;
  uint64_t memsz = 0;  // 0: data.size()
};

// A minimal ELF64 x86-64 executable: header, program headers, segment data.
inline std::vector<uint8_t> MakeElf(const std::vector<Segment>& segs, uint64_t entry) {
  std::vector<uint8_t> out(sizeof(Elf64_Ehdr) + segs.size() * sizeof(Elf64_Phdr));
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_entry = entry;
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = static_cast<uint16_t>(segs.size());
  std::memcpy(out.data(), &eh, sizeof(eh));
  for (size_t i = 0; i < segs.size(); ++i) {
    Elf64_Phdr ph{};
    ph.p_type = segs[i].type;
    ph.p_offset = out.size();
    ph.p_paddr = ph.p_vaddr = segs[i].paddr;
    ph.p_filesz = segs[i].data.size();
    ph.p_memsz = segs[i].memsz ? segs[i].memsz : segs[i].data.size();
    ph.p_flags = PF_R | PF_X;
    std::memcpy(out.data() + sizeof(Elf64_Ehdr) + i * sizeof(Elf64_Phdr), &ph, sizeof(ph));
    out.insert(out.end(), segs[i].data.begin(), segs[i].data.end());
  }
  return out;
}

inline Elf64_Ehdr& Ehdr(std::vector<uint8_t>& elf) { return *reinterpret_cast<Elf64_Ehdr*>(elf.data()); }
inline Elf64_Phdr& Phdr(std::vector<uint8_t>& elf, size_t i) {
  return *reinterpret_cast<Elf64_Phdr*>(elf.data() + sizeof(Elf64_Ehdr) + i * sizeof(Elf64_Phdr));
}

inline std::vector<uint8_t> PvhNote(uint64_t entry) {
  std::vector<uint8_t> n(12 + 4 + 8);
  uint32_t hdr[3] = {4, 8, kXenElfnotePhys32Entry};
  std::memcpy(n.data(), hdr, 12);
  std::memcpy(n.data() + 12, "Xen", 4);
  std::memcpy(n.data() + 16, &entry, 8);
  return n;
}

// A synthetic bzImage: 1 setup sector + boot sector, then `kernel` bytes.
inline std::vector<uint8_t> MakeBzImage(const std::vector<uint8_t>& kernel, uint16_t version = 0x020f,
                                 uint16_t xloadflags = kXlfKernel64) {
  std::vector<uint8_t> img(2 * 512);
  SetupHeader hdr{};
  hdr.setup_sects = 1;
  hdr.boot_flag = kBootFlagMagic;
  hdr.jump = 0x6aeb;  // jmp short to 0x26c: header ends at 0x202 + 0x6a
  hdr.header = kSetupHeaderMagic;
  hdr.version = version;
  hdr.loadflags = kLoadedHigh;
  hdr.syssize = static_cast<uint32_t>(kernel.size() / 16);
  hdr.initrd_addr_max = 0x7fffffff;
  hdr.kernel_alignment = 0x200000;
  hdr.relocatable_kernel = 1;
  hdr.xloadflags = xloadflags;
  hdr.cmdline_size = 2047;
  hdr.pref_address = 0x1000000;
  hdr.init_size = 0x800000;
  std::memcpy(img.data() + kSetupHeaderOffset, &hdr, sizeof(hdr));
  img.insert(img.end(), kernel.begin(), kernel.end());
  return img;
}

inline std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
  return v;
}

// Writes bytes to a new temporary file and returns its path (caller unlinks).
inline std::string WriteTempFile(const std::vector<uint8_t>& bytes) {
  char path[] = "/tmp/kubicle-image-XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return "";
  ssize_t n = ::write(fd, bytes.data(), bytes.size());
  ::close(fd);
  return n == static_cast<ssize_t>(bytes.size()) ? std::string(path) : std::string();
}

}  // namespace kubicle::vmm::arch::test_images
