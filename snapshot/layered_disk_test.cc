#include "snapshot/layered_disk.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstring>

#include "snapshot/testing/disk_fixture.h"
#include "snapshot/testing/temp_dir.h"

namespace kubicle::snapshot {
namespace {

using namespace testing;  // NOLINT
constexpr uint64_t kCluster = 64 << 10;
// Not a multiple of the cluster size: the last cluster is partial.
constexpr uint64_t kDiskSize = 3 * (1 << 20) + 3 * 4096;

class LayeredDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = MakeBase(dir_ / "base.img", kDiskSize);
    ASSERT_EQ(base_.size(), kDiskSize);
    chain_ = {dir_ / "base.img", kDiskSize, {}};
  }
  std::unique_ptr<LayeredDisk> New(const DiskChain& chain, const std::string& overlay) {
    auto d = LayeredDisk::Create(chain, dir_ / overlay);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(*d) : nullptr;
  }

  TempDir dir_;
  std::vector<uint8_t> base_;
  DiskChain chain_;
};

TEST_F(LayeredDiskTest, ReadsThroughToTheBase) {
  auto d = New(chain_, "ov");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->size(), kDiskSize);
  EXPECT_TRUE(ReadAll(*d) == base_);
  std::vector<uint8_t> got;
  ASSERT_TRUE(Read(*d, kCluster - 7, got, 3 * kCluster + 11).ok());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), base_.begin() + kCluster - 7));
  EXPECT_EQ(Read(*d, kDiskSize - 10, got, 11).code(), StatusCode::kOutOfRange);
}

TEST_F(LayeredDiskTest, CopiesUpPartialClusters) {
  auto d = New(chain_, "ov");
  ASSERT_TRUE(d);
  std::vector<uint8_t> model = base_;
  std::vector<uint8_t> data(100, 0xab);
  ASSERT_TRUE(Write(*d, kCluster + 1000, data).ok());
  std::fill_n(model.begin() + kCluster + 1000, 100, 0xab);
  // Partial first cluster, one whole cluster, partial third.
  std::vector<uint8_t> span(2 * kCluster, 0xcd);
  ASSERT_TRUE(Write(*d, 4 * kCluster + 512, span).ok());
  std::fill_n(model.begin() + 4 * kCluster + 512, 2 * kCluster, 0xcd);
  EXPECT_TRUE(ReadAll(*d) == model);
  ASSERT_TRUE(d->Flush().ok());
  std::string ov = d->overlay_path();
  d.reset();
  auto layer = LayerFile::Open(ov, false);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  EXPECT_EQ((*layer)->allocated_count(), 4u);
  EXPECT_TRUE((*layer)->allocated(1) && (*layer)->allocated(4) && (*layer)->allocated(5) &&
              (*layer)->allocated(6));
  auto again = LayeredDisk::OpenExisting(chain_, ov);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(ReadAll(**again) == model);
}

TEST_F(LayeredDiskTest, RandomWritesMatchAModelAcrossReopen) {
  auto d = New(chain_, "ov");
  ASSERT_TRUE(d);
  std::vector<uint8_t> model = base_;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(RandomWrite(*d, model, rng).ok());
    if (i % 50 == 49) {
      ASSERT_TRUE(ReadAll(*d) == model) << "after write " << i;
    }
  }
  // The tail: the last, partial cluster.
  std::vector<uint8_t> tail(5000, 0x11);
  ASSERT_TRUE(Write(*d, kDiskSize - 5000, tail).ok());
  std::fill(model.end() - 5000, model.end(), 0x11);
  ASSERT_TRUE(d->Flush().ok());
  std::string ov = d->overlay_path();
  d.reset();
  auto again = LayeredDisk::OpenExisting(chain_, ov);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(ReadAll(**again) == model);
  EXPECT_EQ(FileCrc(dir_ / "base.img"), Crc32c(base_));
}

TEST_F(LayeredDiskTest, FreezeIsolatesParentAndChild) {
  auto parent = New(chain_, "p1");
  ASSERT_TRUE(parent);
  std::vector<uint8_t> model = base_;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(RandomWrite(*parent, model, rng).ok());
  Result<DiskChain> frozen = parent->Freeze(dir_ / "p2");
  ASSERT_TRUE(frozen.ok()) << frozen.status().ToString();
  ASSERT_EQ(frozen->layers.size(), 1u);
  EXPECT_EQ(frozen->layers[0].path, dir_ / "p1");
  EXPECT_TRUE(parent->chain() == *frozen);
  uint32_t frozen_crc = FileCrc(dir_ / "p1");
  struct stat st{};
  ASSERT_EQ(::stat((dir_ / "p1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);

  auto child = New(*frozen, "c1");
  ASSERT_TRUE(child);
  EXPECT_TRUE(ReadAll(*child) == model);
  std::vector<uint8_t> parent_model = model, child_model = model;
  std::mt19937_64 rp(2), rc(3);
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(RandomWrite(*parent, parent_model, rp).ok());
    ASSERT_TRUE(RandomWrite(*child, child_model, rc).ok());
  }
  ASSERT_TRUE(parent->Flush().ok() && child->Flush().ok());
  EXPECT_TRUE(ReadAll(*parent) == parent_model);
  EXPECT_TRUE(ReadAll(*child) == child_model);
  EXPECT_FALSE(parent_model == child_model);
  EXPECT_EQ(FileCrc(dir_ / "p1"), frozen_crc) << "a shared layer was written after freeze";
  // A fork of the fork.
  Result<DiskChain> grand = child->Freeze(dir_ / "c2");
  ASSERT_TRUE(grand.ok());
  auto grandchild = New(*grand, "g1");
  ASSERT_TRUE(grandchild);
  EXPECT_TRUE(ReadAll(*grandchild) == child_model);
  EXPECT_TRUE(ReadAll(*parent) == parent_model);
}

TEST_F(LayeredDiskTest, ForkedChildGetsItsOwnOverlay) {
  auto disk = New(chain_, "p1");
  ASSERT_TRUE(disk);
  std::vector<uint8_t> model = base_;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(RandomWrite(*disk, model, rng).ok());
  ASSERT_TRUE(disk->Freeze(dir_ / "p2").ok());
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t pid;
  {
    auto lock = disk->LockForFork();
    pid = ::fork();
  }
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: own overlay, then its writes must not reach the parent's files.
    if (!disk->ReplaceOverlay(dir_ / "c1").ok()) ::_exit(2);
    std::vector<uint8_t> ones(kCluster, 1);
    if (!Write(*disk, 0, ones).ok() || !disk->Flush().ok()) ::_exit(3);
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(4);  // parent wrote its block
    std::vector<uint8_t> got;
    if (!Read(*disk, 2 * kCluster, got, kCluster).ok()) ::_exit(5);
    bool sees_parent = !std::equal(got.begin(), got.end(), model.begin() + 2 * kCluster);
    if (!Read(*disk, 0, got, kCluster).ok()) ::_exit(6);
    ::_exit(sees_parent ? 7 : (got == ones ? 0 : 8));
  }
  std::vector<uint8_t> twos(kCluster, 2);
  ASSERT_TRUE(Write(*disk, 2 * kCluster, twos).ok());
  ASSERT_TRUE(disk->Flush().ok());
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::vector<uint8_t> got;
  ASSERT_TRUE(Read(*disk, 0, got, kCluster).ok());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), model.begin())) << "child write leaked";
  ::close(go[0]);
  ::close(go[1]);
}

TEST_F(LayeredDiskTest, FlattenIsEquivalentAndSwapsInLive) {
  auto d = New(chain_, "l0");
  ASSERT_TRUE(d);
  std::vector<uint8_t> model = base_;
  std::mt19937_64 rng(9);
  for (int layer = 1; layer <= 5; ++layer) {
    for (int i = 0; i < 15; ++i) ASSERT_TRUE(RandomWrite(*d, model, rng, 100 << 10).ok());
    ASSERT_TRUE(d->Freeze(dir_ / ("l" + std::to_string(layer))).ok());
  }
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(RandomWrite(*d, model, rng).ok());  // in the overlay
  DiskChain before = d->chain();
  ASSERT_EQ(before.layers.size(), 5u);

  // Flatten the middle three into one file: a new disk over that chain reads the same.
  Result<LayerRef> mid = FlattenLayers(before, 1, 3, dir_ / "mid");
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  DiskChain shorter = before;
  shorter.layers.erase(shorter.layers.begin() + 1, shorter.layers.begin() + 4);
  shorter.layers.insert(shorter.layers.begin() + 1, *mid);
  auto view_old = New(before, "v1");
  auto view_new = New(shorter, "v2");
  ASSERT_TRUE(view_old && view_new);
  EXPECT_TRUE(ReadAll(*view_old) == ReadAll(*view_new));

  // Flatten the whole chain under the live disk.
  Result<LayerRef> all = d->Flatten(dir_ / "all");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(d->chain().layers.size(), 1u);
  EXPECT_EQ(all->id, before.layers.back().id);
  EXPECT_TRUE(ReadAll(*d) == model);
  ASSERT_TRUE(RandomWrite(*d, model, rng).ok());
  EXPECT_TRUE(ReadAll(*d) == model);
  // Swapping a layer that is not a flatten of the range is refused.
  EXPECT_EQ(d->SwapLayers(0, 1, *mid).code(), StatusCode::kFailedPrecondition);
}

TEST_F(LayeredDiskTest, ChainsAreBounded) {
  auto d = New(chain_, "o0");
  ASSERT_TRUE(d);
  std::vector<uint8_t> one(10, 1);
  for (size_t i = 1; i <= LayeredDisk::kMaxLayers; ++i) {
    ASSERT_TRUE(Write(*d, i * 4096, one).ok());
    ASSERT_TRUE(d->Freeze(dir_ / ("o" + std::to_string(i))).ok()) << i;
    EXPECT_EQ(d->NeedsFlatten(), i > LayeredDisk::kFlattenThreshold);
  }
  Result<DiskChain> full = d->Freeze(dir_ / "too-many");
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(::access((dir_ / "too-many").c_str(), F_OK), 0);
  ASSERT_TRUE(d->Flatten(dir_ / "flat").ok());
  EXPECT_TRUE(d->Freeze(dir_ / "after").ok());
}

TEST_F(LayeredDiskTest, RefusesChainsThatDoNotLinkUp) {
  auto d = New(chain_, "a");
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->Freeze(dir_ / "b").ok());
  Result<DiskChain> two = d->Freeze(dir_ / "c");
  ASSERT_TRUE(two.ok());
  DiskChain wrong_id = *two;
  wrong_id.layers[1].id[0] ^= 1;
  EXPECT_EQ(LayeredDisk::Create(wrong_id, dir_ / "x1").status().code(), StatusCode::kFailedPrecondition);
  DiskChain swapped = *two;
  std::swap(swapped.layers[0], swapped.layers[1]);
  EXPECT_EQ(LayeredDisk::Create(swapped, dir_ / "x2").status().code(), StatusCode::kFailedPrecondition);
  DiskChain wrong_size = *two;
  wrong_size.size += 512;
  EXPECT_EQ(LayeredDisk::Create(wrong_size, dir_ / "x3").status().code(), StatusCode::kFailedPrecondition);
  // An overlay made for one chain is refused on another.
  EXPECT_EQ(LayeredDisk::OpenExisting(chain_, dir_ / "c").status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kubicle::snapshot
