// ImageStore against a registry that lies: a scripted HTTP server on
// 127.0.0.1 (nodeagent/testing/http_test_server.h) serving manifests and
// blobs that are wrong in one way each. Every case must end in a Status,
// bounded memory, and nothing unverified under blobs/.
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sha256.h"
#include "noderuntime/nodeagent/testing/http_test_server.h"
#include "noderuntime/oci/image_store.h"

namespace kubicle::noderuntime::oci {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Reply = nodeagent::TestHttpReply;
using Server = nodeagent::TestHttpServer;

std::string Digest(const std::string& data) { return "sha256:" + Sha256Hex(data); }

std::string Manifest(const std::string& config, const std::vector<std::pair<std::string, uint64_t>>& layers) {
  std::string s = R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
                  R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" +
                  Digest(config) + R"(","size":)" + std::to_string(config.size()) + R"(},"layers":[)";
  for (size_t i = 0; i < layers.size(); ++i) {
    s += std::string(i ? "," : "") + R"({"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":")" +
         layers[i].first + R"(","size":)" + std::to_string(layers[i].second) + "}";
  }
  return s + "]}";
}

const std::string kConfig = R"({"config":{"Env":["A=b"]}})";
const std::string kLayer = "the honest layer's bytes";

// A registry whose replies each test scripts by path; unscripted paths 404.
class HostileRegistryTest : public ::testing::Test {
 protected:
  HostileRegistryTest()
      : server_([this](const std::string& path) {
          std::lock_guard<std::mutex> l(mu_);
          ++hits_[path];
          auto it = replies_.find(path);
          if (it == replies_.end()) return Reply{.status = 404, .reason = "Not Found"};
          return it->second(path);
        }) {
    dir_ = (fs::temp_directory_path() / ("kubicle-oci-hostile-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  ~HostileRegistryTest() override { fs::remove_all(dir_); }

  std::string Host() const { return server_.Url("").substr(7); }  // after "http://"
  void Serve(const std::string& path, std::function<Reply(const std::string&)> f) {
    std::lock_guard<std::mutex> l(mu_);
    replies_[path] = std::move(f);
  }
  void ServeBody(const std::string& path, const std::string& body) {
    Serve(path, [body](const std::string&) { return Reply{.body = body}; });
  }
  int Hits(const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    return hits_[path];
  }
  // An image "r/x:1" whose one layer the test serves.
  void ServeImage(const std::string& layer_digest, uint64_t layer_size) {
    ServeBody("/v2/r/x/manifests/1", Manifest(kConfig, {{layer_digest, layer_size}}));
    ServeBody("/v2/r/x/blobs/" + Digest(kConfig), kConfig);
  }
  Result<PulledImage> Pull(const std::string& ref = "r/x:1") {
    auto store = ImageStore::Open({.dir = dir_, .insecure_registries = {Host()}, .timeout = std::chrono::seconds(20)});
    if (!store.ok()) return store.status();
    return (*store)->Pull(Host() + "/" + ref, nullptr);
  }
  std::string BlobPath(const std::string& digest) const { return dir_ + "/blobs/sha256/" + digest.substr(7); }
  std::string PartialPath(const std::string& digest) const {
    return dir_ + "/partial/" + digest.substr(7) + ".partial";
  }

  std::mutex mu_;
  std::map<std::string, std::function<Reply(const std::string&)>> replies_;
  std::map<std::string, int> hits_;
  Server server_;
  std::string dir_;
};

TEST_F(HostileRegistryTest, HonestRegistryForReference) {
  ServeImage(Digest(kLayer), kLayer.size());
  ServeBody("/v2/r/x/blobs/" + Digest(kLayer), kLayer);
  Result<PulledImage> img = Pull();
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(img->config.env, std::vector<std::string>{"A=b"});
  EXPECT_TRUE(fs::exists(BlobPath(Digest(kLayer))));
}

TEST_F(HostileRegistryTest, WrongDigestIsDataLossAndNothingIsKept) {
  const std::string lie(kLayer.size(), 'x');
  ServeImage(Digest(kLayer), kLayer.size());
  ServeBody("/v2/r/x/blobs/" + Digest(kLayer), lie);
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kDataLoss) << img.status().ToString();
  EXPECT_FALSE(fs::exists(BlobPath(Digest(kLayer))));
  EXPECT_FALSE(fs::exists(PartialPath(Digest(kLayer))));
}

TEST_F(HostileRegistryTest, TruncatedBlobIsKeptAsPartialAndTheNextPullCompletesIt) {
  ServeImage(Digest(kLayer), kLayer.size());
  const std::string blob = "/v2/r/x/blobs/" + Digest(kLayer);
  Serve(blob, [&](const std::string&) {
    // Says the whole size, sends half, closes.
    return Reply{.body = kLayer.substr(0, 10), .content_length = false,
                 .headers = {{"Content-Length", std::to_string(kLayer.size())}}};
  });
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kUnavailable) << img.status().ToString();
  EXPECT_FALSE(fs::exists(BlobPath(Digest(kLayer))));
  ServeBody(blob, kLayer);  // this server ignores Range: a 200 restarts from zero
  img = Pull();
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_TRUE(fs::exists(BlobPath(Digest(kLayer))));
}

TEST_F(HostileRegistryTest, BlobBiggerThanItsDescriptorIsRefused) {
  const std::string big = kLayer + "and more";
  ServeImage(Digest(kLayer), kLayer.size());
  ServeBody("/v2/r/x/blobs/" + Digest(kLayer), big);
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted) << img.status().ToString();
  // Streamed without a length: refused as soon as the count passes the size.
  Serve("/v2/r/x/blobs/" + Digest(kLayer), [](const std::string&) { return Reply{.stream_bytes = 1ull << 30}; });
  img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted) << img.status().ToString();
  EXPECT_FALSE(fs::exists(BlobPath(Digest(kLayer))));
  EXPECT_FALSE(fs::exists(PartialPath(Digest(kLayer))));
}

TEST_F(HostileRegistryTest, EndlessAndOversizedManifestsAreRefused) {
  Serve("/v2/r/x/manifests/1", [](const std::string&) { return Reply{.stream_bytes = 1ull << 30}; });
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted) << img.status().ToString();
  Serve("/v2/r/x/manifests/1", [](const std::string&) { return Reply{.body = std::string(5 << 20, ' ')}; });
  img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted) << img.status().ToString();
  EXPECT_THAT(img.status().message(), HasSubstr("limit"));
}

TEST_F(HostileRegistryTest, RedirectLoopIsRefused) {
  ServeImage(Digest(kLayer), kLayer.size());
  const std::string blob = "/v2/r/x/blobs/" + Digest(kLayer);
  Serve(blob, [blob](const std::string&) {
    return Reply{.status = 307, .reason = "Temporary Redirect", .headers = {{"Location", blob}}};
  });
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_THAT(img.status().message(), HasSubstr("redirects"));
  EXPECT_EQ(Hits(blob), 6);  // the first GET and 5 redirects, then no more
}

TEST_F(HostileRegistryTest, IndexWithoutLinuxAmd64IsNotFound) {
  const std::string manifest = Manifest(kConfig, {});
  ServeBody("/v2/r/x/manifests/1",
            R"({"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":)"
            R"("application/vnd.oci.image.manifest.v1+json","digest":")" +
                Digest(manifest) + R"(","size":)" + std::to_string(manifest.size()) +
                R"(,"platform":{"os":"windows","architecture":"amd64"}}]})");
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(img.status().message(), HasSubstr("windows/amd64"));
}

TEST_F(HostileRegistryTest, ManifestNotMatchingTheDigestAskedForIsDataLoss) {
  const std::string real = Manifest(kConfig, {});
  const std::string asked = Digest(real + " ");
  ServeBody("/v2/r/x/manifests/" + asked, real);
  Result<PulledImage> img = Pull("r/x@" + asked);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kDataLoss) << img.status().ToString();
}

TEST_F(HostileRegistryTest, BearerChallengeIsAnsweredWithAToken) {
  ServeImage(Digest(kLayer), kLayer.size());
  ServeBody("/v2/r/x/blobs/" + Digest(kLayer), kLayer);
  const std::string realm = server_.Url("/token");
  // The first manifest GET is refused; the token endpoint must be asked.
  auto first = std::make_shared<std::atomic<bool>>(true);
  const std::string body = Manifest(kConfig, {{Digest(kLayer), kLayer.size()}});
  Serve("/v2/r/x/manifests/1", [=](const std::string&) {
    if (first->exchange(false)) {
      return Reply{.status = 401, .reason = "Unauthorized",
                   .headers = {{"WWW-Authenticate", "Bearer realm=\"" + realm + "\",service=\"reg\""}}};
    }
    return Reply{.body = body};
  });
  Serve("/token?scope=repository%3Ar%2Fx%3Apull&service=reg",
        [](const std::string&) { return Reply{.body = R"({"token":"t0k"})"}; });
  Result<PulledImage> img = Pull();
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(Hits("/token?scope=repository%3Ar%2Fx%3Apull&service=reg"), 1);
}

TEST_F(HostileRegistryTest, ImageOverTheSizeLimitFetchesNoLayer) {
  ServeImage(Digest(kLayer), 9ull << 30);
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Hits("/v2/r/x/blobs/" + Digest(kLayer)), 0);
  // Sizes that would wrap a 64-bit sum are refused the same way.
  ServeBody("/v2/r/x/manifests/1", Manifest(kConfig, {{Digest(kLayer), 1ull << 63}, {Digest(kLayer), 1ull << 63}}));
  img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
