// ImageRootfsCache with a scripted puller and builder: one build per
// digest, moved tags, failed and concurrent builds, what a collection keeps.
#include "noderuntime/nodeagent/image_rootfs_cache.h"

#include "noderuntime/nodeagent/testing/fake_image_puller.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace fs = std::filesystem;

using testing::FakeImagePuller;
std::string Digest(char c) { return testing::FakeDigest(c); }

class ImageRootfsCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rootfs-cache-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    auto puller = std::make_unique<FakeImagePuller>();
    puller_ = puller.get();
    cache_ = std::make_unique<ImageRootfsCache>((dir_ / "rootfs").string(), 3, std::move(puller),
                                                [this](const oci::PulledImage& image, const std::string& out,
                                                       const ProgressFn&) { return Build(image, out); });
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the image's digest into the file, unless told to fail (after a
  // partial write, as a real build that dies half-way).
  Status Build(const oci::PulledImage& image, const std::string& out) {
    ++builds_;
    while (hold_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::ofstream(out) << "ext4 of " << image.manifest_digest;
    if (fail_) return Status::DataLoss("layer 1 of 1: digest mismatch");
    return Status::Ok();
  }
  std::string Read(const std::string& path) {
    std::stringstream s;
    s << std::ifstream(path).rdbuf();
    return s.str();
  }
  std::vector<std::string> Files() {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ / "rootfs", ec)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
  FakeImagePuller* puller_ = nullptr;
  std::unique_ptr<ImageRootfsCache> cache_;
  std::atomic<int> builds_{0};
  std::atomic<bool> fail_{false}, hold_{false};
};

TEST_F(ImageRootfsCacheTest, BuildsOncePerDigestUnderItsFinalName) {
  puller_->Set("reg.example/py:3", Digest('a'));
  puller_->Set("reg.example/py@" + Digest('a'), Digest('a'));
  std::vector<std::string> progress;
  auto first = cache_->Resolve("reg.example/py:3", [&](const std::string& m) { progress.push_back(m); });
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->manifest_digest, Digest('a'));
  EXPECT_EQ(first->path, (dir_ / "rootfs" / (std::string(64, 'a') + "-v3.ext4")).string());
  EXPECT_EQ(Read(first->path), "ext4 of " + Digest('a'));
  EXPECT_EQ(progress, (std::vector<std::string>{"pulling reg.example/py:3",
                                                "building the root filesystem of " + Digest('a')}));
  // The same image by digest, and by tag again: no second build.
  auto by_digest = cache_->Resolve("reg.example/py@" + Digest('a'), {});
  ASSERT_TRUE(by_digest.ok());
  EXPECT_EQ(by_digest->path, first->path);
  ASSERT_TRUE(cache_->Resolve("reg.example/py:3", {}).ok());
  EXPECT_EQ(builds_, 1);
  EXPECT_EQ(Files(), std::vector<std::string>{std::string(64, 'a') + "-v3.ext4"});
}

TEST_F(ImageRootfsCacheTest, AMovedTagResolvesToItsNewImage) {
  puller_->Set("reg.example/py:3", Digest('a'));
  auto old_image = cache_->Resolve("reg.example/py:3", {});
  ASSERT_TRUE(old_image.ok());
  puller_->Set("reg.example/py:3", Digest('b'));  // pushed again
  auto moved = cache_->Resolve("reg.example/py:3", {});
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->manifest_digest, Digest('b'));
  EXPECT_NE(moved->path, old_image->path);
  EXPECT_EQ(Read(moved->path), "ext4 of " + Digest('b'));
  EXPECT_EQ(builds_, 2);
}

TEST_F(ImageRootfsCacheTest, AFailedBuildLeavesNothingAndIsTriedAgain) {
  puller_->Set("reg.example/py:3", Digest('a'));
  fail_ = true;
  auto failed = cache_->Resolve("reg.example/py:3", {});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(failed.status().message(), "layer 1 of 1: digest mismatch");
  EXPECT_TRUE(Files().empty()) << "neither the partial build nor a final name";
  fail_ = false;
  auto again = cache_->Resolve("reg.example/py:3", {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(builds_, 2);
}

TEST_F(ImageRootfsCacheTest, PullErrorsAndBadDigestsBuildNothing) {
  auto down = cache_->Resolve("reg.example/none:1", {});
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  // A digest names a file: anything but sha256:<64 lowercase hex> is refused.
  for (const std::string& bad : {std::string("sha256:../../etc/passwd"), "sha256:" + std::string(64, 'A'),
                                 "sha512:" + std::string(64, 'a'), std::string("")}) {
    puller_->Set("reg.example/odd:1", bad);
    auto r = cache_->Resolve("reg.example/odd:1", {});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << bad;
  }
  EXPECT_EQ(builds_, 0);
  EXPECT_TRUE(Files().empty());
}

TEST_F(ImageRootfsCacheTest, ConcurrentResolvesOfOneImageBuildOnce) {
  puller_->Set("reg.example/py:3", Digest('a'));
  puller_->Set("reg.example/py-alias:3", Digest('a'));  // another name, same image
  hold_ = true;
  std::vector<std::thread> threads;
  std::vector<Result<ImageRootfs>> got(4, Status::Internal("not run"));
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = cache_->Resolve(i % 2 ? "reg.example/py:3" : "reg.example/py-alias:3", {}); });
  }
  while (builds_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the others queue behind it
  hold_ = false;
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds_, 1);
  for (const auto& r : got) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->path, got[0]->path);
  }
}

TEST_F(ImageRootfsCacheTest, CollectKeepsWhatIsUsedAndRemovesTheRest) {
  puller_->Set("reg.example/a:1", Digest('a'));
  puller_->Set("reg.example/b:1", Digest('b'));
  auto a = cache_->Resolve("reg.example/a:1", {});
  auto b = cache_->Resolve("reg.example/b:1", {});
  ASSERT_TRUE(a.ok() && b.ok());
  const fs::path root = dir_ / "rootfs";
  const std::string older = std::string(64, 'a') + "-v2.ext4";  // a node template from before an upgrade
  const std::string stale = std::string(64, 'c') + "-v3.ext4.building-0123456789abcdef";  // a crashed build
  for (const std::string& f : {older, stale, std::string("notes.txt")}) std::ofstream(root / f) << "x";

  ASSERT_TRUE(cache_->Collect({Digest('a')}).ok());
  EXPECT_EQ(Files(), (std::vector<std::string>{older, std::string(64, 'a') + "-v3.ext4", "notes.txt"}))
      << "b unused, the stale build gone; every format of a kept digest and files not its own stay";
  EXPECT_EQ(puller_->collections(), 1);
  EXPECT_EQ(puller_->collected_keep(), std::set<std::string>{Digest('a')}) << "layers of b go too";
  EXPECT_EQ(cache_->DigestOfPath((root / older).string()), Digest('a'));

  ASSERT_TRUE(cache_->Collect({}).ok());
  EXPECT_EQ(Files(), std::vector<std::string>{"notes.txt"});
  // b again: built anew.
  ASSERT_TRUE(cache_->Resolve("reg.example/b:1", {}).ok());
  EXPECT_EQ(builds_, 3);
}

TEST_F(ImageRootfsCacheTest, CollectWithNothingBuiltYet) {
  EXPECT_TRUE(cache_->Collect({Digest('a')}).ok()) << "no directory yet is nothing to collect";
  EXPECT_EQ(puller_->collections(), 1);
}

TEST_F(ImageRootfsCacheTest, DigestOfPathNamesOnlyItsOwnFiles) {
  const std::string root = (dir_ / "rootfs").string();
  const std::string hex(64, 'e');
  EXPECT_EQ(cache_->DigestOfPath(root + "/" + hex + "-v3.ext4"), Digest('e'));
  EXPECT_EQ(cache_->DigestOfPath(root + "/" + hex + "-v12.ext4"), Digest('e'));
  for (const std::string& other :
       {std::string("/var/lib/kubicle/images/rootfs.ext4"), "/elsewhere/" + hex + "-v3.ext4", root + "/" + hex + ".ext4",
        root + "/" + hex + "-v.ext4", root + "/" + hex + "-vx.ext4", root + "/" + hex + "-v3.ext4.building-1",
        root + "/" + std::string(64, 'E') + "-v3.ext4", root + "/sub/" + hex + "-v3.ext4",
        root + "/" + std::string(63, 'e') + "-v3.ext4", std::string("")}) {
    EXPECT_EQ(cache_->DigestOfPath(other), "") << other;
  }
}

}  // namespace
}  // namespace kubicle::noderuntime::nodeagent
