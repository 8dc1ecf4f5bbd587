#include "snapshot/memory_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"
#include "snapshot/digest.h"
#include "snapshot/testing/temp_dir.h"

namespace kubicle::snapshot {
namespace {

using testing::TempDir;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = 1 << 20;

std::vector<uint8_t> ReadAll(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY));
  struct stat st{};
  ::fstat(fd.get(), &st);
  std::vector<uint8_t> out(static_cast<size_t>(st.st_size));
  EXPECT_EQ(::pread(fd.get(), out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
  return out;
}

// Mappings as one byte string in file order.
std::vector<uint8_t> Flatten(const std::vector<MmapRegion>& maps) {
  std::vector<uint8_t> out;
  for (const MmapRegion& m : maps) out.insert(out.end(), m.data(), m.data() + m.size());
  return out;
}

// Guest memory as the VMM would hold it: one anonymous mapping per range.
struct TestMemory {
  std::vector<MemoryRange> ranges;
  std::vector<MmapRegion> maps;
  std::vector<MemoryRegion> View() const {
    std::vector<MemoryRegion> out;
    for (size_t i = 0; i < maps.size(); ++i)
      out.push_back({ranges[i].guest_base, ranges[i].size, maps[i].data()});
    return out;
  }
  // Host pointer of guest address gpa.
  uint8_t* At(uint64_t gpa) const {
    for (size_t i = 0; i < maps.size(); ++i)
      if (gpa >= ranges[i].guest_base && gpa < ranges[i].guest_base + ranges[i].size)
        return maps[i].data() + (gpa - ranges[i].guest_base);
    return nullptr;
  }
};

// The chunked digest computed the slow, obvious way.
std::string NaiveDigest(const std::vector<uint8_t>& bytes) {
  ChunkedDigest d;
  for (size_t at = 0; at < bytes.size(); at += kDigestChunkBytes) {
    d.AddChunk({bytes.data() + at, std::min<size_t>(kDigestChunkBytes, bytes.size() - at)});
  }
  return d.FinalHex();
}

class MemoryFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_.ranges = Ranges();
    for (const MemoryRange& r : mem_.ranges) {
      auto m = MmapRegion::Anonymous(r.size);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      mem_.maps.push_back(std::move(*m));
    }
  }
  void Fill(uint64_t gpa, uint8_t value) { std::memset(mem_.At(gpa), value, kPage); }
  Result<MemoryFileInfo> WriteTo(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644));
    if (!fd) return Status::FromErrno("create");
    return WriteMemoryFile(mem_.View(), fd.get());
  }
  std::vector<MemoryRange> Ranges() const { return {{0, 8 * kMiB}, {16 * kMiB, 4 * kMiB}}; }

  TempDir dir_;
  TestMemory mem_;
};

TEST_F(MemoryFileTest, WritesOnlyNonZeroPagesAndKeepsHoles) {
  Fill(0, 0x11);
  Fill(5 * kPage, 0x22);
  Fill(255 * kPage, 0x33);  // last page of the first 1 MiB chunk
  Fill(256 * kPage, 0x44);  // first page of the second
  Fill(16 * kMiB, 0x55);    // second region, first page
  Fill(20 * kMiB - kPage, 0x66);
  Fill(7 * kPage, 0x77);
  Fill(7 * kPage, 0x00);                       // touched, then zero again
  volatile uint8_t touched = *mem_.At(3 * kMiB);  // read fault: zero page
  (void)touched;

  Result<MemoryFileInfo> info = WriteTo(dir_ / "memory");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, 12 * kMiB);
  EXPECT_EQ(info->data_bytes, 6 * kPage);
  std::vector<uint8_t> file = ReadAll(dir_ / "memory");
  ASSERT_EQ(file.size(), 12 * kMiB);
  EXPECT_TRUE(file == Flatten(mem_.maps));

  UniqueFd fd(::open((dir_ / "memory").c_str(), O_RDONLY));
  struct stat st{};
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 1 * kMiB) << "file is not sparse";
  EXPECT_EQ(::lseek(fd.get(), kPage, SEEK_DATA), static_cast<off_t>(5 * kPage));
  EXPECT_EQ(::lseek(fd.get(), 5 * kPage, SEEK_HOLE), static_cast<off_t>(6 * kPage));

  EXPECT_EQ(info->digest, NaiveDigest(file));
  Result<std::string> from_file = ChunkedDigestOfFile(fd.get());
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(*from_file, info->digest);
}

TEST_F(MemoryFileTest, EmptyMemoryIsAllHoles) {
  Result<MemoryFileInfo> info = WriteTo(dir_ / "memory");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->data_bytes, 0u);
  EXPECT_EQ(info->digest, NaiveDigest(std::vector<uint8_t>(12 * kMiB, 0)));
}

TEST_F(MemoryFileTest, MappedFileRestoresContentPrivately) {
  Fill(9 * kPage, 0xab);
  Fill(16 * kMiB + 3 * kPage, 0xcd);
  ASSERT_TRUE(WriteTo(dir_ / "memory").ok());
  auto a = MapMemoryFile(dir_ / "memory", Ranges());
  auto b = MapMemoryFile(dir_ / "memory", Ranges());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_TRUE(Flatten(*a) == Flatten(mem_.maps));
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[1].size(), 4 * kMiB);
  // Writes stay private to one mapping and never reach the file.
  const uint32_t mark = 0xdeadbeef;
  std::memcpy((*a)[0].data() + 9 * kPage, &mark, 4);
  uint32_t seen = 0;
  std::memcpy(&seen, (*b)[0].data() + 9 * kPage, 4);
  EXPECT_EQ(seen, 0xababababu);
  EXPECT_EQ(ReadAll(dir_ / "memory")[9 * kPage], 0xab);
}

// A restored VM's memory is a file mapping whose untouched pages are not
// resident yet hold data: they must be read, not skipped.
TEST_F(MemoryFileTest, SnapshotOfAFileBackedMappingKeepsUntouchedPages) {
  Fill(2 * kPage, 0x5a);
  Fill(17 * kMiB, 0xa5);
  ASSERT_TRUE(WriteTo(dir_ / "first").ok());
  auto restored = MapMemoryFile(dir_ / "first", Ranges());
  ASSERT_TRUE(restored.ok());
  (*restored)[0].data()[100 * kPage] = 0x01;  // one private page
  TestMemory again{Ranges(), std::move(*restored)};
  UniqueFd fd(::open((dir_ / "second").c_str(), O_RDWR | O_CREAT | O_EXCL, 0644));
  Result<MemoryFileInfo> info = WriteMemoryFile(again.View(), fd.get());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->data_bytes, 3 * kPage);
  std::vector<uint8_t> second = ReadAll(dir_ / "second");
  EXPECT_EQ(second[2 * kPage], 0x5a);
  EXPECT_EQ(second[8 * kMiB + 1 * kMiB], 0xa5);  // 17 MiB guest = 9 MiB in the file
  EXPECT_EQ(second[100 * kPage], 0x01);
}

TEST_F(MemoryFileTest, RefusesShortLongAndMissingFiles) {
  ASSERT_TRUE(WriteTo(dir_ / "memory").ok());
  ASSERT_EQ(::truncate((dir_ / "memory").c_str(), 12 * kMiB - kPage), 0);
  auto short_file = MapMemoryFile(dir_ / "memory", Ranges());
  ASSERT_FALSE(short_file.ok());
  EXPECT_EQ(short_file.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(short_file.status().message().find("shorter than the guest"), std::string::npos);
  ASSERT_EQ(::truncate((dir_ / "memory").c_str(), 13 * kMiB), 0);
  auto long_file = MapMemoryFile(dir_ / "memory", Ranges());
  ASSERT_FALSE(long_file.ok());
  EXPECT_NE(long_file.status().message().find("longer than"), std::string::npos);
  auto missing = MapMemoryFile(dir_ / "nope", Ranges());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kubicle::snapshot
