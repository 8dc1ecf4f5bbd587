// OpenOciRootfsCache: the node's image store opened from its flags' values;
// what it refuses at start. Pulls and builds against a real registry:
// e2e/image_template_e2e_test.cc.
#include "noderuntime/nodeagent/oci_rootfs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace fs = std::filesystem;

class OciRootfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("oci-rootfs-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(OciRootfsTest, OpensTheStoreWithItsRootfsDirectoryBesideTheLayers) {
  auto cache = OpenOciRootfsCache({.dir = (dir_ / "store").string()});
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_EQ((*cache)->dir(), (dir_ / "store" / "rootfs").string());
  EXPECT_TRUE(fs::is_directory(dir_ / "store" / "blobs" / "sha256"));
  // Its files are named by digest and the current format.
  const std::string hex(64, 'f');
  EXPECT_EQ((*cache)->DigestOfPath((*cache)->dir() + "/" + hex + "-v" + std::to_string(kImageRootfsFormat) + ".ext4"),
            "sha256:" + hex);
  EXPECT_TRUE((*cache)->Collect({}).ok()) << "nothing to collect in a new store";
}

TEST_F(OciRootfsTest, AnUnreadableRegistryConfigOrCaFailsTheOpen) {
  auto no_ca = OpenOciRootfsCache({.dir = (dir_ / "s1").string(), .ca_file = (dir_ / "missing.pem").string()});
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.status().message().find("missing.pem"), std::string::npos) << no_ca.status().ToString();
  std::ofstream(dir_ / "config.json") << R"({"auths": {"reg.example": {"auth": "bm90LXVzZXItcGFzcw=="}}})";
  auto bad = OpenOciRootfsCache({.dir = (dir_ / "s2").string(), .docker_config_path = (dir_ / "config.json").string()});
  ASSERT_FALSE(bad.ok()) << "an auth that is not user:pass";
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
  auto gone = OpenOciRootfsCache({.dir = (dir_ / "s3").string(), .docker_config_path = (dir_ / "none.json").string()});
  EXPECT_FALSE(gone.ok());
}

}  // namespace
}  // namespace kubicle::noderuntime::nodeagent
