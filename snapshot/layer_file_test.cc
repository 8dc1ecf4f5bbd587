#include "snapshot/layer_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "snapshot/crc32c.h"
#include "snapshot/testing/temp_dir.h"

namespace kubicle::snapshot {
namespace {

using testing::TempDir;
constexpr uint64_t kSize = 1 << 20;  // 16 clusters of 64 KiB
constexpr uint64_t kMapA = 4096, kMapB = 8192;

void Poke(const std::string& path, uint64_t offset, uint8_t value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY));
  ASSERT_EQ(::pwrite(fd.get(), &value, 1, static_cast<off_t>(offset)), 1);
}

class LayerFileTest : public ::testing::Test {
 protected:
  std::unique_ptr<LayerFile> Make() {
    auto l = LayerFile::Create(dir_ / "layer", kSize, LayerId{}, {});
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(*l) : nullptr;
  }
  std::string path() { return dir_ / "layer"; }
  TempDir dir_;
};

TEST_F(LayerFileTest, HeaderAndMapRoundTrip) {
  LayerId parent{};
  parent[3] = 7;
  auto l = LayerFile::Create(path(), kSize + 100, parent, {.cluster_shift = 16, .id = {}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->cluster_count(), 17u);
  (*l)->MarkAllocated(0);
  (*l)->MarkAllocated(16);
  ASSERT_TRUE((*l)->Sync().ok());
  auto back = LayerFile::Open(path(), false);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->id(), (*l)->id());
  EXPECT_EQ((*back)->parent(), parent);
  EXPECT_EQ((*back)->virtual_size(), kSize + 100);
  EXPECT_EQ((*back)->allocated_count(), 2u);
  EXPECT_TRUE((*back)->allocated(16));
  EXPECT_EQ((*back)->generation(), 2u);
}

// A lazily durable layer (a VM's overlay) behaves the same; only when its
// creation reaches the disk differs (the first Sync or Seal).
TEST_F(LayerFileTest, LazilyDurableLayerSyncsAndSealsLikeAnyOther) {
  for (bool write : {true, false}) {
    const std::string p = path() + (write ? "-w" : "-empty");
    auto l = LayerFile::Create(p, kSize, LayerId{}, {.cluster_shift = 16, .id = {}, .durable = false});
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    if (write) {
      (*l)->MarkAllocated(5);
      ASSERT_TRUE((*l)->Sync().ok());
      auto back = LayerFile::Open(p, false);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_TRUE((*back)->allocated(5));
    }
    ASSERT_TRUE((*l)->Seal().ok());
    EXPECT_FALSE((*l)->writable());
    struct stat st{};
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0444u);
    auto back = LayerFile::Open(p, false);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ((*back)->allocated(5), write);
  }
}

TEST_F(LayerFileTest, UnsyncedAllocationIsNotVisibleAfterReopen) {
  auto l = Make();
  l->MarkAllocated(3);
  auto back = LayerFile::Open(path(), false);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE((*back)->allocated(3));
}

TEST_F(LayerFileTest, TornMapWriteFallsBackToThePreviousMap) {
  auto l = Make();
  l->MarkAllocated(1);
  ASSERT_TRUE(l->Sync().ok());  // generation 2 in slot B
  l->MarkAllocated(2);
  ASSERT_TRUE(l->Sync().ok());  // generation 3 in slot A
  Poke(path(), kMapA + 32, 0xff);  // damage slot A's bitmap
  auto back = LayerFile::Open(path(), false);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->generation(), 2u);
  EXPECT_TRUE((*back)->allocated(1));
  EXPECT_FALSE((*back)->allocated(2));
  Poke(path(), kMapB + 9, 0xff);  // and slot B's generation
  auto none = LayerFile::Open(path(), false);
  EXPECT_EQ(none.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(none.status().message().find("no valid allocation map"), std::string::npos);
}

TEST_F(LayerFileTest, RejectsDamagedHeaderAndTruncation) {
  Make();
  Poke(path(), 30, 0x42);  // inside virtual_size
  auto bad = LayerFile::Open(path(), false);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("header checksum"), std::string::npos);
  ::unlink(path().c_str());
  Make();
  ASSERT_EQ(::truncate(path().c_str(), 100000), 0);
  EXPECT_EQ(LayerFile::Open(path(), false).status().code(), StatusCode::kDataLoss);
  Poke(path(), 0, 'X');
  EXPECT_EQ(LayerFile::Open(path(), false).status().code(), StatusCode::kInvalidArgument);
}

// Rewrites u64 header fields of a layer and recomputes the header CRC, so
// only the geometry checks stand between the values and Open.
void RewriteHeader(const std::string& path, std::initializer_list<std::pair<size_t, uint64_t>> f) {
  UniqueFd fd(::open(path.c_str(), O_RDWR));
  std::vector<uint8_t> h(4096);
  ASSERT_EQ(::pread(fd.get(), h.data(), h.size(), 0), 4096);
  for (auto [off, v] : f) std::memcpy(h.data() + off, &v, 8);
  uint32_t crc = Crc32c({h.data(), 88});
  std::memcpy(h.data() + 88, &crc, 4);
  ASSERT_EQ(::pwrite(fd.get(), h.data(), h.size(), 0), 4096);
}

// A valid, empty map in slot A claiming `clusters` clusters (generation 9).
void WriteEmptyMapA(const std::string& path, uint64_t clusters) {
  std::vector<uint8_t> m(32, 0);
  std::memcpy(m.data(), "KBLMAP\0\0", 8);
  uint64_t gen = 9;
  std::memcpy(m.data() + 8, &gen, 8);
  std::memcpy(m.data() + 16, &clusters, 8);
  uint32_t crc = Crc32c({m.data(), 24});
  crc = Crc32c({m.data() + 32, (clusters + 7) / 8}, crc);
  std::memcpy(m.data() + 24, &crc, 4);
  UniqueFd fd(::open(path.c_str(), O_RDWR));
  ASSERT_EQ(::pwrite(fd.get(), m.data(), m.size(), kMapA), 32);
}

// Header fields whose sums and products wrap 64 bits must not pass the
// geometry checks by wrapping to small values.
TEST_F(LayerFileTest, RejectsHeaderFieldsThatOverflow) {
  constexpr size_t kVirtualSize = 24, kMapSlotSize = 72, kDataOffset = 80;
  // virtual_size + cluster_size - 1 wraps: zero clusters for a 16 EiB disk
  // (with a map that agrees, this used to open).
  Make();
  RewriteHeader(path(), {{kVirtualSize, UINT64_MAX}});
  WriteEmptyMapA(path(), 0);
  auto huge = LayerFile::Open(path(), false);
  EXPECT_EQ(huge.status().code(), StatusCode::kDataLoss) << huge.status().ToString();
  // 2 * map_slot_size wraps past the data offset check.
  ::unlink(path().c_str());
  Make();
  RewriteHeader(path(), {{kMapSlotSize, (uint64_t{1} << 63) + 4096}});
  EXPECT_EQ(LayerFile::Open(path(), false).status().code(), StatusCode::kDataLoss);
  // data_offset + virtual_size wraps below the file size: data reads would
  // have gone to offset data_offset + x mod 2^64 (the header).
  ::unlink(path().c_str());
  Make();
  RewriteHeader(path(), {{kDataOffset, UINT64_MAX - kSize + 2}});
  auto wrapped = LayerFile::Open(path(), false);
  EXPECT_EQ(wrapped.status().code(), StatusCode::kDataLoss) << wrapped.status().ToString();
}

TEST_F(LayerFileTest, CreateRefusesSizesWhoseClusterCountWraps) {
  auto l = LayerFile::Create(dir_ / "huge", UINT64_MAX - 10, LayerId{}, {});
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument) << l.status().ToString();
}

TEST_F(LayerFileTest, SealedLayerRefusesWrites) {
  auto l = Make();
  ASSERT_TRUE(l->Seal().ok());
  EXPECT_FALSE(l->writable());
  uint8_t b = 1;
  iovec v{&b, 1};
  EXPECT_EQ(l->Write(0, {&v, 1}).code(), StatusCode::kPermissionDenied);
  struct stat st{};
  ASSERT_EQ(::stat(path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
}

}  // namespace
}  // namespace kubicle::snapshot
