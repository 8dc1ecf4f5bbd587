#include "vmm/arch/x86_64/kernel_loader.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "vmm/arch/x86_64/layout.h"
#include "vmm/arch/x86_64/test_images.h"

namespace kubicle::vmm::arch {
namespace {

using namespace ::kubicle::vmm::arch::test_images;  // NOLINT

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<GuestMemory>> m = GuestMemory::CreateAnonymous(MemoryRanges(64 * kMiB));
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
  }
  Result<LoadedKernel> Elf(const std::vector<uint8_t>& bytes) {
    return LoadElf(*mem_, BytesSource(bytes, "test.elf"));
  }
  void ExpectElfError(const std::vector<uint8_t>& bytes, const std::string& fragment) {
    Result<LoadedKernel> k = Elf(bytes);
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(k.status().message().find(fragment), std::string::npos) << k.status().message();
  }
  std::string TempFile(const std::vector<uint8_t>& bytes) {
    char path[] = "/tmp/kubicle-loader-XXXXXX";
    int fd = ::mkstemp(path);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
    temp_files_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& p : temp_files_) ::unlink(p.c_str());
  }
  std::unique_ptr<GuestMemory> mem_;
  std::vector<std::string> temp_files_;
};

const std::vector<uint8_t> kCode = {0xb0, 0x4b, 0x66, 0xba, 0xf8, 0x03, 0xee, 0xf4};

TEST_F(LoaderTest, LoadsValidElfAndZeroesBss) {
  auto bss = mem_->Slice(0x200000 + kCode.size(), 0x1000);
  ASSERT_TRUE(bss.ok());
  std::memset(bss->data(), 0xaa, bss->size());
  std::vector<uint8_t> elf = MakeElf({{PT_LOAD, 0x200000, kCode, 0x2000}}, 0x200000);
  Result<LoadedKernel> k = Elf(elf);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->format, KernelFormat::kElf);
  ASSERT_TRUE(k->entry64.has_value());
  EXPECT_EQ(*k->entry64, 0x200000u);
  EXPECT_FALSE(k->pvh_entry.has_value());
  EXPECT_FALSE(k->setup_header.has_value());
  EXPECT_EQ(k->load_start, 0x200000u);
  EXPECT_EQ(k->load_end, 0x202000u);
  std::vector<uint8_t> got(kCode.size());
  ASSERT_TRUE(mem_->Read(0x200000, got.data(), got.size()).ok());
  EXPECT_EQ(got, kCode);
  for (uint8_t b : *bss) ASSERT_EQ(b, 0);
}

TEST_F(LoaderTest, FindsPvhNote) {
  std::vector<uint8_t> elf =
      MakeElf({{PT_LOAD, 0x100000, kCode, 0}, {PT_NOTE, 0, PvhNote(0x100004), 0}}, 0x100000);
  Result<LoadedKernel> k = Elf(elf);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  ASSERT_TRUE(k->pvh_entry.has_value());
  EXPECT_EQ(*k->pvh_entry, 0x100004u);
  EXPECT_EQ(*k->entry64, 0x100000u);
}

TEST_F(LoaderTest, PvhOnlyKernelHasNo64BitEntry) {
  std::vector<uint8_t> elf = MakeElf(
      {{PT_LOAD, 0x100000, kCode, 0}, {PT_NOTE, 0, PvhNote(0x100004), 0}}, 0xffffffff81000000ull);
  Result<LoadedKernel> k = Elf(elf);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_FALSE(k->entry64.has_value());
  EXPECT_EQ(*k->pvh_entry, 0x100004u);
}

TEST_F(LoaderTest, RejectsCorruptElf) {
  std::vector<uint8_t> good = MakeElf({{PT_LOAD, 0x200000, kCode, 0}}, 0x200000);

  std::vector<uint8_t> truncated(good.begin(), good.begin() + 40);
  ExpectElfError(truncated, "truncated ELF header");

  std::vector<uint8_t> e = good;
  e[EI_CLASS] = ELFCLASS32;
  ExpectElfError(e, "not a 64-bit ELF");

  e = good;
  Ehdr(e).e_machine = EM_AARCH64;
  ExpectElfError(e, "is not x86-64");

  e = good;
  Ehdr(e).e_phoff = good.size() + 100;
  ExpectElfError(e, "lie beyond the file");

  e = good;
  Ehdr(e).e_phoff = UINT64_MAX - 8;  // offset + size overflows
  ExpectElfError(e, "lie beyond the file");

  e = good;
  Ehdr(e).e_phnum = 0;
  ExpectElfError(e, "no program headers");

  e = good;
  Ehdr(e).e_phentsize = 32;
  ExpectElfError(e, "program header size");

  e = good;
  Phdr(e, 0).p_offset = UINT64_MAX - 0x10;  // offset + filesz overflows
  ExpectElfError(e, "lies beyond the file");

  e = good;
  Phdr(e, 0).p_filesz = good.size();  // runs past the end
  Phdr(e, 0).p_memsz = good.size();
  ExpectElfError(e, "lies beyond the file");

  e = good;
  Phdr(e, 0).p_memsz = 2;  // filesz > memsz
  ExpectElfError(e, "filesz larger than memsz");

  e = good;
  Phdr(e, 0).p_paddr = 0x10000000;  // 256 MiB in a 64 MiB guest
  ExpectElfError(e, "outside guest memory");

  e = good;
  Phdr(e, 0).p_paddr = 64 * kMiB - 4;  // straddles the end of RAM
  ExpectElfError(e, "outside guest memory");

  e = good;
  Phdr(e, 0).p_paddr = UINT64_MAX - 2;  // address + memsz overflows
  ExpectElfError(e, "overflows");

  e = good;
  Phdr(e, 0).p_paddr = 0x7000;  // over the zero page
  ExpectElfError(e, "below 1 MiB");

  e = good;
  Phdr(e, 0).p_type = PT_NOTE;  // no PT_LOAD at all
  ExpectElfError(e, "no loadable");

  e = good;
  Ehdr(e).e_entry = 0x900000;
  ExpectElfError(e, "entry point");
}

TEST_F(LoaderTest, RejectsNoteRunningPastItsSegment) {
  std::vector<uint8_t> note = PvhNote(0x100004);
  note[4] = 200;  // descsz far beyond the segment
  std::vector<uint8_t> elf = MakeElf({{PT_LOAD, 0x100000, kCode, 0}, {PT_NOTE, 0, note, 0}}, 0x100000);
  ExpectElfError(elf, "note runs past");
}

TEST_F(LoaderTest, LoadsValidBzImage) {
  std::vector<uint8_t> kernel = Pattern(8192);
  std::vector<uint8_t> img = MakeBzImage(kernel);
  Result<LoadedKernel> k = LoadKernelImage(*mem_, BytesSource(img, "bz"));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->format, KernelFormat::kBzImage);
  EXPECT_EQ(*k->entry64, 0x100200u);
  ASSERT_TRUE(k->setup_header.has_value());
  EXPECT_EQ(+k->setup_header->version, 0x020f);
  EXPECT_EQ(+k->setup_header->cmdline_size, 2047u);
  EXPECT_EQ(k->load_end, 0x1000000u + 0x800000u);
  std::vector<uint8_t> got(kernel.size());
  ASSERT_TRUE(mem_->Read(0x100000, got.data(), got.size()).ok());
  EXPECT_EQ(got, kernel);
}

void ExpectBzError(const GuestMemory& mem, const std::vector<uint8_t>& img,
                   const std::string& fragment) {
  Result<LoadedKernel> k = LoadBzImage(mem, BytesSource(img, "bz"));
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find(fragment), std::string::npos) << k.status().message();
}

TEST_F(LoaderTest, RejectsCorruptBzImage) {
  std::vector<uint8_t> kernel = Pattern(4096);
  std::vector<uint8_t> img = MakeBzImage(kernel);
  std::vector<uint8_t> e = img;
  std::memcpy(e.data() + 0x202, "Nope", 4);
  ExpectBzError(*mem_, e, "no \"HdrS\"");

  ExpectBzError(*mem_, MakeBzImage(kernel, 0x0206), "boot protocol 2.06 is older than 2.12");
  ExpectBzError(*mem_, MakeBzImage(kernel, 0x020f, 0), "XLF_KERNEL_64");

  std::vector<uint8_t> setup_only(img.begin(), img.begin() + 1024);
  ExpectBzError(*mem_, setup_only, "truncated");
  std::vector<uint8_t> short_kernel(img.begin(), img.begin() + 1024 + 100);
  ExpectBzError(*mem_, short_kernel, "truncated");
  std::vector<uint8_t> tiny(img.begin(), img.begin() + 0x210);
  ExpectBzError(*mem_, tiny, "truncated");

  e = img;
  e[0x211] = 0;  // loadflags without LOADED_HIGH
  ExpectBzError(*mem_, e, "zImage");
}

TEST_F(LoaderTest, BzImageTooBigForGuestMemory) {
  std::vector<uint8_t> img = MakeBzImage(Pattern(4096));
  SetupHeader* hdr = reinterpret_cast<SetupHeader*>(img.data() + kSetupHeaderOffset);
  hdr->init_size = 128 * kMiB;
  ExpectBzError(*mem_, img, "needs guest memory");
}

TEST_F(LoaderTest, FileThatIsNeitherElfNorBzImage) {
  std::string path = TempFile(std::vector<uint8_t>(4096, 'x'));
  Result<LoadedKernel> k = LoadKernel(*mem_, path);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(), "kernel " + path + " is neither an ELF nor a bzImage");
  std::string tiny = TempFile({'h', 'i'});
  EXPECT_NE(LoadKernel(*mem_, tiny).status().message().find("neither"), std::string::npos);
  EXPECT_EQ(LoadKernel(*mem_, "/nonexistent/vmlinux").status().code(), StatusCode::kNotFound);
}

TEST_F(LoaderTest, LoadsElfFromFile) {
  std::string path = TempFile(MakeElf({{PT_LOAD, 0x100000, kCode, 0}}, 0x100000));
  Result<LoadedKernel> k = LoadKernel(*mem_, path);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(*k->entry64, 0x100000u);
}

TEST_F(LoaderTest, InitrdGoesPageAlignedToTheTopOfLowRam) {
  LoadedKernel kernel;
  kernel.load_end = 0x300000;
  std::vector<uint8_t> initrd = Pattern(10000);
  Result<LoadedInitrd> r = LoadInitrdImage(*mem_, BytesSource(initrd, "initrd"), kernel);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size, 10000u);
  EXPECT_EQ(r->addr % kPageSize, 0u);
  EXPECT_LE(r->addr + r->size, 64 * kMiB);
  EXPECT_GT(r->addr + r->size, 64 * kMiB - kPageSize);
  std::vector<uint8_t> got(initrd.size());
  ASSERT_TRUE(mem_->Read(r->addr, got.data(), got.size()).ok());
  EXPECT_EQ(got, initrd);
}

TEST_F(LoaderTest, InitrdHonoursInitrdAddrMax) {
  LoadedKernel kernel;
  kernel.load_end = 0x300000;
  kernel.setup_header = SetupHeader{};
  kernel.setup_header->initrd_addr_max = 0x1ffffff;  // 32 MiB
  std::vector<uint8_t> initrd = Pattern(5000);
  Result<LoadedInitrd> r = LoadInitrdImage(*mem_, BytesSource(initrd, "initrd"), kernel);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->addr, 0x2000000u - kPageSize * 2);
}

TEST_F(LoaderTest, InitrdThatDoesNotFitIsRefused) {
  LoadedKernel kernel;
  kernel.load_end = 60 * kMiB;
  std::vector<uint8_t> initrd = Pattern(8 * kMiB);
  Result<LoadedInitrd> r = LoadInitrdImage(*mem_, BytesSource(initrd, "initrd"), kernel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("does not fit"), std::string::npos);
  EXPECT_EQ(LoadInitrdImage(*mem_, BytesSource({}, "empty"), kernel).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubicle::vmm::arch
