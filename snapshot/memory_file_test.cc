#include "snapshot/memory_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"
#include "snapshot/digest.h"
#include "snapshot/memory_reservation.h"
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

// The guest's memory as one byte string in file order.
std::vector<uint8_t> Flatten(const vmm::GuestMemory& mem) {
  std::vector<uint8_t> out;
  for (const vmm::GuestRegion& r : mem.regions()) out.insert(out.end(), r.host, r.host + r.size);
  return out;
}

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
    auto m = vmm::GuestMemory::CreateAnonymous({{0, 8 * kMiB}, {16 * kMiB, 4 * kMiB}});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mem_ = std::move(*m);
  }
  void Fill(uint64_t gpa, uint8_t value) {
    std::vector<uint8_t> page(kPage, value);
    ASSERT_TRUE(mem_->Write(gpa, page.data(), kPage).ok());
  }
  Result<MemoryFileInfo> WriteTo(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644));
    if (!fd) return Status::FromErrno("create");
    return WriteMemoryFile(*mem_, fd.get());
  }
  std::vector<MemoryRange> Ranges() const { return {{0, 8 * kMiB}, {16 * kMiB, 4 * kMiB}}; }

  TempDir dir_;
  std::unique_ptr<vmm::GuestMemory> mem_;
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
  ASSERT_TRUE(mem_->ReadObj<uint64_t>(3 * kMiB).ok());  // read fault: zero page

  Result<MemoryFileInfo> info = WriteTo(dir_ / "memory");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, 12 * kMiB);
  EXPECT_EQ(info->data_bytes, 6 * kPage);
  std::vector<uint8_t> file = ReadAll(dir_ / "memory");
  ASSERT_EQ(file.size(), 12 * kMiB);
  EXPECT_TRUE(file == Flatten(*mem_));

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
  EXPECT_TRUE(Flatten(**a) == Flatten(*mem_));
  EXPECT_EQ((*a)->regions()[1].guest_base, 16 * kMiB);
  // Writes stay private to one mapping and never reach the file.
  ASSERT_TRUE((*a)->WriteObj<uint32_t>(9 * kPage, 0xdeadbeef).ok());
  EXPECT_EQ(*(*b)->ReadObj<uint32_t>(9 * kPage), 0xabababab);
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
  ASSERT_TRUE((*restored)->WriteObj<uint8_t>(100 * kPage, 0x01).ok());  // one private page
  UniqueFd fd(::open((dir_ / "second").c_str(), O_RDWR | O_CREAT | O_EXCL, 0644));
  Result<MemoryFileInfo> info = WriteMemoryFile(**restored, fd.get());
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

TEST_F(MemoryFileTest, ReservationIsReplacedInPlaceByTheFile) {
  Fill(3 * kPage, 0x3c);
  ASSERT_TRUE(WriteTo(dir_ / "memory").ok());
  Result<MemoryReservation> res = MemoryReservation::Create(Ranges());
  ASSERT_TRUE(res.ok());
  ASSERT_EQ(::truncate((dir_ / "memory").c_str(), 4 * kMiB), 0);
  auto bad = res->MapFile(dir_ / "memory", Ranges());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  ASSERT_EQ(::truncate((dir_ / "memory").c_str(), 12 * kMiB), 0);
  auto other = res->MapFile(dir_ / "memory", {{0, 12 * kMiB}});
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  auto mem = res->MapFile(dir_ / "memory", Ranges());  // still usable after failures
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_EQ(*(*mem)->ReadObj<uint8_t>(3 * kPage), 0x3c);
  EXPECT_EQ((*mem)->regions()[1].guest_base, 16 * kMiB);
  EXPECT_EQ(res->MapFile(dir_ / "memory", Ranges()).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(MemoryFileTest, ReservationCanBecomeAnonymousMemory) {
  Result<MemoryReservation> res = MemoryReservation::Create(Ranges());
  ASSERT_TRUE(res.ok());
  uint8_t* host = nullptr;
  auto mem = res->IntoAnonymous();
  ASSERT_TRUE(mem.ok());
  host = (*mem)->regions()[0].host;
  ASSERT_TRUE((*mem)->WriteObj<uint32_t>(0, 7).ok());
  EXPECT_EQ(*reinterpret_cast<uint32_t*>(host), 7u);
  EXPECT_EQ(res->IntoAnonymous().status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kubicle::snapshot
