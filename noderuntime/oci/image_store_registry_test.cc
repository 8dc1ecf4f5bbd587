// ImageStore against a real registry: Debian's docker-registry on 127.0.0.1
// (e2e/registry/registry_fixture.h), over HTTP and over TLS with basic auth,
// images pushed by e2e/registry/push_image.py. No root needed (label unit);
// skips saying so when docker-registry is not installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/sha256.h"
#include "e2e/registry/registry_fixture.h"
#include "noderuntime/oci/image_store.h"

namespace kubicle::noderuntime::oci {
namespace {

namespace fs = std::filesystem;
using e2e::LoopbackRegistry;
using e2e::PushImage;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "kubicle-oci-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

// A directory to push as one layer.
std::string LayerDir(const TempDir& tmp, const std::string& name, const std::string& content) {
  std::string dir = tmp.path() + "/" + name;
  WriteFile(dir + "/etc/" + name, content);
  return dir;
}

#define SKIP_WITHOUT_REGISTRY(reg)                              \
  do {                                                          \
    if ((reg).missing_package()) GTEST_SKIP() << (reg).error(); \
    ASSERT_TRUE((reg).ok()) << (reg).error();                   \
  } while (0)

// Every layer of `img` is a stored file whose sha256 is its digest.
void ExpectVerified(const PulledImage& img) {
  for (const LayerBlob& l : img.layers) {
    Result<std::string> hex = Sha256FileHex(l.path);
    ASSERT_TRUE(hex.ok());
    EXPECT_EQ("sha256:" + *hex, l.digest);
    EXPECT_EQ(fs::file_size(l.path), l.size);
    EXPECT_EQ(fs::status(l.path).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  }
}

TEST(ImageStoreRegistryTest, HttpPullSharesLayersFollowsMovedTagsAndCollects) {
  LoopbackRegistry reg({});
  SKIP_WITHOUT_REGISTRY(reg);
  TempDir tmp;
  const std::string base = LayerDir(tmp, "base", std::string(300 << 10, 'b'));
  const std::string app1 = LayerDir(tmp, "app1", "version 1");
  nlohmann::json v1 = PushImage(
      reg, {"--repo", "team/app", "--tag", "1", "--layer-dir", base, "--layer-dir", app1, "--gzip",
            "--env", "A=1", "--workdir", "/srv", "--cmd", R"(["/bin/app","--serve"])"});
  ASSERT_FALSE(v1.is_discarded());

  auto store =
      ImageStore::Open({.dir = tmp.path() + "/store", .insecure_registries = {reg.address()}});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string ref = reg.address() + "/team/app:1";
  Result<PulledImage> img = (*store)->Pull(ref, nullptr);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(img->reference, ref);
  EXPECT_EQ(img->manifest_digest, v1["manifest_digest"]);
  ASSERT_EQ(img->layers.size(), 2u);
  EXPECT_EQ(img->layers[0].digest, v1["layers"][0]["digest"]);
  EXPECT_EQ(img->layers[1].digest, v1["layers"][1]["digest"]);
  EXPECT_EQ(img->layers[0].media_type, "application/vnd.oci.image.layer.v1.tar+gzip");
  EXPECT_EQ(img->total_bytes, img->layers[0].size + img->layers[1].size);
  EXPECT_EQ(img->config.env, std::vector<std::string>{"A=1"});
  EXPECT_EQ(img->config.working_dir, "/srv");
  EXPECT_EQ(img->config.cmd, (std::vector<std::string>{"/bin/app", "--serve"}));
  ExpectVerified(*img);
  EXPECT_EQ((*store)->fetch_stats().blobs, 3u);  // config + 2 layers

  // Again: the tag is resolved, nothing is fetched.
  Result<PulledImage> again = (*store)->Pull(ref, nullptr);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->manifest_digest, img->manifest_digest);
  EXPECT_EQ((*store)->fetch_stats().blobs, 3u);

  // The tag moves to an image sharing the base layer: only the new layer and
  // config are fetched.
  const std::string app2 = LayerDir(tmp, "app2", "version 2");
  nlohmann::json v2 = PushImage(reg, {"--repo", "team/app", "--tag", "1", "--layer-dir", base,
                                      "--layer-dir", app2, "--gzip"});
  ASSERT_FALSE(v2.is_discarded());
  ASSERT_NE(v2["manifest_digest"], v1["manifest_digest"]);
  Result<PulledImage> moved = (*store)->Pull(ref, nullptr);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->manifest_digest, v2["manifest_digest"]);
  EXPECT_EQ(moved->layers[0].path, img->layers[0].path);
  EXPECT_EQ((*store)->fetch_stats().blobs, 5u);
  ExpectVerified(*moved);

  // Keeping v2 frees v1's own layer, config and manifest, and nothing of v2.
  Result<uint64_t> freed = (*store)->CollectGarbage({moved->manifest_digest});
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_FALSE(fs::exists(img->layers[1].path));
  EXPECT_TRUE(fs::exists(moved->layers[0].path));
  EXPECT_TRUE(fs::exists(moved->layers[1].path));
  EXPECT_GE(*freed, img->layers[1].size);
  Result<PulledImage> by_digest =
      (*store)->Pull(reg.address() + "/team/app@" + moved->manifest_digest, nullptr);
  ASSERT_TRUE(by_digest.ok()) << by_digest.status().ToString();
  EXPECT_EQ((*store)->fetch_stats().blobs, 5u);
  // Keeping nothing empties the store.
  freed = (*store)->CollectGarbage({});
  ASSERT_TRUE(freed.ok());
  EXPECT_GE(*freed, moved->total_bytes);
  EXPECT_TRUE(fs::is_empty(tmp.path() + "/store/blobs/sha256"));
}

TEST(ImageStoreRegistryTest, TlsWithBasicAuthNeedsTheCaAndTheCredentials) {
  LoopbackRegistry reg({.tls = true, .user = "alice", .password = "s3cret"});
  SKIP_WITHOUT_REGISTRY(reg);
  TempDir tmp;
  nlohmann::json pushed = PushImage(
      reg, {"--repo", "private/x", "--tag", "v1", "--layer-dir", LayerDir(tmp, "l", "secret layer"),
            "--docker", "--index", "linux/arm64,linux/amd64"});
  ASSERT_FALSE(pushed.is_discarded());
  const std::string ref = reg.address() + "/private/x:v1";
  const std::string config = tmp.path() + "/config.json";
  WriteFile(config, reg.docker_config());

  {  // No CA: the certificate is not trusted.
    auto store = ImageStore::Open({.dir = tmp.path() + "/s1", .docker_config_path = config});
    ASSERT_TRUE(store.ok());
    Result<PulledImage> img = (*store)->Pull(ref, nullptr);
    ASSERT_FALSE(img.ok());
    EXPECT_EQ(img.status().code(), StatusCode::kUnavailable) << img.status().ToString();
  }
  {  // No credentials: refused.
    auto store = ImageStore::Open({.dir = tmp.path() + "/s2", .ca_file = reg.ca_file()});
    ASSERT_TRUE(store.ok());
    Result<PulledImage> img = (*store)->Pull(ref, nullptr);
    ASSERT_FALSE(img.ok());
    EXPECT_EQ(img.status().code(), StatusCode::kPermissionDenied) << img.status().ToString();
  }
  auto store = ImageStore::Open(
      {.dir = tmp.path() + "/s3", .docker_config_path = config, .ca_file = reg.ca_file()});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Result<PulledImage> img = (*store)->Pull(ref, nullptr);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  // The index was resolved to its linux/amd64 manifest.
  EXPECT_EQ(img->manifest_digest, pushed["manifest_digest"]);
  ASSERT_EQ(img->layers.size(), 1u);
  EXPECT_EQ(img->layers[0].media_type, "application/vnd.docker.image.rootfs.diff.tar");
  ExpectVerified(*img);
}

TEST(ImageStoreRegistryTest, IndexWithoutLinuxAmd64AndOversizeImagesAreRefused) {
  LoopbackRegistry reg({});
  SKIP_WITHOUT_REGISTRY(reg);
  TempDir tmp;
  const std::string layer = LayerDir(tmp, "l", std::string(64 << 10, 'z'));
  ASSERT_FALSE(PushImage(reg, {"--repo", "a/arm", "--layer-dir", layer, "--index", "linux/arm64"})
                   .is_discarded());
  ASSERT_FALSE(PushImage(reg, {"--repo", "a/big", "--layer-dir", layer}).is_discarded());
  auto store = ImageStore::Open({.dir = tmp.path() + "/store",
                                 .insecure_registries = {reg.address()},
                                 .max_image_bytes = 32 << 10});
  ASSERT_TRUE(store.ok());
  Result<PulledImage> arm = (*store)->Pull(reg.address() + "/a/arm:latest", nullptr);
  ASSERT_FALSE(arm.ok());
  EXPECT_EQ(arm.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(arm.status().message(), HasSubstr("linux/amd64"));
  Result<PulledImage> big = (*store)->Pull(reg.address() + "/a/big", nullptr);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().ToString();
  EXPECT_EQ((*store)->fetch_stats().blobs, 0u);  // refused from the manifest, before any layer
  Result<PulledImage> missing = (*store)->Pull(reg.address() + "/a/none:1", nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
}

TEST(ImageStoreRegistryTest, ResumesAPartialDownloadWithARangeRequest) {
  LoopbackRegistry reg({});
  SKIP_WITHOUT_REGISTRY(reg);
  TempDir tmp;
  std::string content;
  for (int i = 0; content.size() < (1 << 20); ++i) content += std::to_string(i * 7919) + "\n";
  ASSERT_FALSE(
      PushImage(reg, {"--repo", "r/x", "--layer-dir", LayerDir(tmp, "l", content)}).is_discarded());
  const std::string ref = reg.address() + "/r/x";
  auto full = ImageStore::Open({.dir = tmp.path() + "/a", .insecure_registries = {reg.address()}});
  ASSERT_TRUE(full.ok());
  Result<PulledImage> a = (*full)->Pull(ref, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const LayerBlob& layer = a->layers.at(0);

  // What a crashed Pull leaves: the first half of the layer under .partial.
  const uint64_t half = layer.size / 2;
  std::ifstream in(layer.path, std::ios::binary);
  std::string prefix(half, '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(half));
  WriteFile(tmp.path() + "/b/partial/" + layer.digest.substr(7) + ".partial", prefix);

  auto resumed =
      ImageStore::Open({.dir = tmp.path() + "/b", .insecure_registries = {reg.address()}});
  ASSERT_TRUE(resumed.ok());
  Result<PulledImage> b = (*resumed)->Pull(ref, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectVerified(*b);
  // Only the second half crossed the network (plus the config, as before).
  EXPECT_EQ((*resumed)->fetch_stats().bytes, (*full)->fetch_stats().bytes - half);
  EXPECT_FALSE(fs::exists(tmp.path() + "/b/partial/" + layer.digest.substr(7) + ".partial"));
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
