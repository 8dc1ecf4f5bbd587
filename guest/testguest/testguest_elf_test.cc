// Checks the built test guest ELF against the boot contract: ELF64 x86-64
// executable, entry and every PT_LOAD at/above 1 MiB with p_paddr == p_vaddr,
// entry inside an executable segment, a PVH note, and no instruction this
// machine's emulator cannot run (SSE/AVX, XSAVE family, INT3, ENDBR).
#include <elf.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<uint8_t> ReadElf() {
  std::ifstream f(KUBICLE_TESTGUEST_ELF, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

template <typename T>
T At(const std::vector<uint8_t>& b, size_t off) {
  T v{};
  if (off + sizeof(T) <= b.size()) std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

TEST(TestGuestElf, IsA64BitX86ExecutableLinkedAtOneMiB) {
  const auto elf = ReadElf();
  ASSERT_GT(elf.size(), sizeof(Elf64_Ehdr)) << "missing " << KUBICLE_TESTGUEST_ELF;
  const auto eh = At<Elf64_Ehdr>(elf, 0);
  ASSERT_EQ(0, std::memcmp(eh.e_ident, ELFMAG, SELFMAG));
  EXPECT_EQ(eh.e_ident[EI_CLASS], ELFCLASS64);
  EXPECT_EQ(eh.e_ident[EI_DATA], ELFDATA2LSB);
  EXPECT_EQ(eh.e_type, ET_EXEC);
  EXPECT_EQ(eh.e_machine, EM_X86_64);
  EXPECT_GE(eh.e_entry, 0x100000u);
  ASSERT_EQ(eh.e_phentsize, sizeof(Elf64_Phdr));

  int loads = 0;
  bool entry_in_exec = false, pvh_note = false;
  for (int i = 0; i < eh.e_phnum; ++i) {
    const auto ph = At<Elf64_Phdr>(elf, eh.e_phoff + i * sizeof(Elf64_Phdr));
    if (ph.p_type == PT_LOAD) {
      ++loads;
      EXPECT_GE(ph.p_paddr, 0x100000u);
      EXPECT_EQ(ph.p_paddr, ph.p_vaddr);
      EXPECT_LE(ph.p_filesz, ph.p_memsz);
      EXPECT_LE(ph.p_offset + ph.p_filesz, elf.size());
      EXPECT_LT(ph.p_paddr + ph.p_memsz, 1ull << 30) << "must fit the VMM's 1 GiB identity map";
      if ((ph.p_flags & PF_X) && eh.e_entry >= ph.p_vaddr && eh.e_entry < ph.p_vaddr + ph.p_filesz) {
        entry_in_exec = true;
      }
    }
    if (ph.p_type == PT_NOTE) {
      // namesz, descsz, type, "Xen\0", 32-bit entry
      pvh_note = At<uint32_t>(elf, ph.p_offset + 8) == 18 &&
                 std::memcmp(elf.data() + ph.p_offset + 12, "Xen", 4) == 0 &&
                 At<uint32_t>(elf, ph.p_offset + 16) >= 0x100000;
    }
  }
  EXPECT_GE(loads, 1);
  EXPECT_TRUE(entry_in_exec);
  EXPECT_TRUE(pvh_note);
  EXPECT_LT(elf.size(), 256u * 1024) << "the test guest should stay tiny";
}

TEST(TestGuestElf, UsesNoInstructionTheEmulatorLacks) {
  // Skips only without objdump (binutils, scripts/install-deps.sh); objdump
  // failing on the ELF fails the test.
  if (std::system("command -v objdump >/dev/null 2>&1") != 0) GTEST_SKIP() << "objdump is not installed";
  const std::string cmd = std::string("objdump -d --no-show-raw-insn ") + KUBICLE_TESTGUEST_ELF +
                          " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[512];
  int lines = 0;
  std::vector<std::string> bad;
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    ++lines;
    const std::string l(line);
    for (const char* word : {"%xmm", "%ymm", "%zmm", "xsave", "xrstor", "int3", "endbr64", "%st"}) {
      if (l.find(word) != std::string::npos) bad.push_back(l);
    }
  }
  EXPECT_EQ(::pclose(p), 0) << cmd;
  ASSERT_GT(lines, 0) << cmd << " printed nothing";
  EXPECT_TRUE(bad.empty()) << bad.size() << " offending instructions, first: " << bad[0];
}

}  // namespace
