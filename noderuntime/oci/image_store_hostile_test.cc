// ImageStore against a registry that lies: a scripted HTTP server on
// 127.0.0.1 (nodeagent/testing/http_test_server.h) serving manifests and
// blobs that are wrong in one way each. Every case must end in a Status,
// bounded memory, and nothing unverified under blobs/.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/sha256.h"
#include "noderuntime/nodeagent/testing/http_test_server.h"
#include "noderuntime/oci/blob_lock.h"
#include "noderuntime/oci/image_store.h"

namespace kubicle::noderuntime::oci {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Reply = nodeagent::TestHttpReply;
using Server = nodeagent::TestHttpServer;

std::string Digest(const std::string& data) { return "sha256:" + Sha256Hex(data); }

std::string Manifest(const std::string& config,
                     const std::vector<std::pair<std::string, uint64_t>>& layers) {
  std::string s = R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
                  R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" +
                  Digest(config) + R"(","size":)" + std::to_string(config.size()) +
                  R"(},"layers":[)";
  for (size_t i = 0; i < layers.size(); ++i) {
    s += std::string(i ? "," : "") +
         R"({"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":")" + layers[i].first +
         R"(","size":)" + std::to_string(layers[i].second) + "}";
  }
  return s + "]}";
}

// A request head lowercased, "name: value" written "name:value" (clients
// differ in the space).
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t p; (p = s.find(": ")) != std::string::npos;) s.erase(p + 1, 1);
  return s;
}

// The stored file holds exactly `content`.
void ExpectStoredAs(const std::string& path, const std::string& content) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(std::string(std::istreambuf_iterator<char>(in), {}) == content) << path;
}

const std::string kConfig = R"({"config":{"Env":["A=b"]}})";
const std::string kLayer = "the honest layer's bytes";

// A registry whose replies each test scripts by path; unscripted paths 404.
class HostileRegistryTest : public ::testing::Test {
 protected:
  HostileRegistryTest()
      : server_([this](const std::string& path, const std::string& head) {
          std::function<Reply(const std::string&)> reply;
          {
            std::lock_guard<std::mutex> l(mu_);
            ++hits_[path];
            heads_[path] = Lower(head);
            auto it = replies_.find(path);
            if (it == replies_.end()) return Reply{.status = 404, .reason = "Not Found"};
            reply = it->second;
          }
          return reply(path);  // unlocked: a reply may look at Head()
        }) {
    dir_ = (fs::temp_directory_path() /
            ("kubicle-oci-hostile-" + std::to_string(::getpid()) + "-" +
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
  // The last request head for `path`, lowercased.
  std::string Head(const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    return heads_[path];
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
    auto store = ImageStore::Open(
        {.dir = dir_, .insecure_registries = {Host()}, .timeout = std::chrono::seconds(20)});
    if (!store.ok()) return store.status();
    return (*store)->Pull(Host() + "/" + ref, nullptr);
  }
  std::string BlobPath(const std::string& digest) const {
    return dir_ + "/blobs/sha256/" + digest.substr(7);
  }
  std::string PartialPath(const std::string& digest) const {
    return dir_ + "/partial/" + digest.substr(7) + ".partial";
  }

  std::mutex mu_;
  std::map<std::string, std::function<Reply(const std::string&)>> replies_;
  std::map<std::string, int> hits_;
  std::map<std::string, std::string> heads_;
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
    return Reply{.body = kLayer.substr(0, 10),
                 .content_length = false,
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
  Serve("/v2/r/x/blobs/" + Digest(kLayer),
        [](const std::string&) { return Reply{.stream_bytes = 1ull << 30}; });
  img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted) << img.status().ToString();
  EXPECT_FALSE(fs::exists(BlobPath(Digest(kLayer))));
  EXPECT_FALSE(fs::exists(PartialPath(Digest(kLayer))));
}

TEST_F(HostileRegistryTest, EndlessAndOversizedManifestsAreRefused) {
  Serve("/v2/r/x/manifests/1",
        [](const std::string&) { return Reply{.stream_bytes = 1ull << 30}; });
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted) << img.status().ToString();
  Serve("/v2/r/x/manifests/1",
        [](const std::string&) { return Reply{.body = std::string(5 << 20, ' ')}; });
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
      return Reply{
          .status = 401,
          .reason = "Unauthorized",
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
  ServeBody("/v2/r/x/manifests/1",
            Manifest(kConfig, {{Digest(kLayer), 1ull << 63}, {Digest(kLayer), 1ull << 63}}));
  img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted);
}

// A slow layer (3 MiB in 256 KiB pieces, 150 ms apart): progress is
// reported while it downloads, and two Pulls at once fetch it once.
TEST_F(HostileRegistryTest, SlowLayerReportsProgressAndConcurrentPullsFetchItOnce) {
  std::string layer(3 << 20, '\0');
  for (size_t i = 0; i < layer.size(); ++i) layer[i] = static_cast<char>(i * 131 % 251);
  ServeImage(Digest(layer), layer.size());
  const std::string blob = "/v2/r/x/blobs/" + Digest(layer);
  Serve(blob, [layer](const std::string&) {
    return Reply{.body = layer, .piece_bytes = 256 << 10, .pace = std::chrono::milliseconds(150)};
  });
  auto store = ImageStore::Open(
      {.dir = dir_, .insecure_registries = {Host()}, .timeout = std::chrono::seconds(30)});
  ASSERT_TRUE(store.ok());
  std::mutex mu;
  std::vector<std::string> messages;
  PullProgressFn progress = [&](const std::string& m) {
    std::lock_guard<std::mutex> l(mu);
    messages.push_back(m);
  };
  Result<PulledImage> a = Status::Internal("not run"), b = Status::Internal("not run");
  std::thread t([&] { a = (*store)->Pull(Host() + "/r/x:1", progress); });
  b = (*store)->Pull(Host() + "/r/x:1", nullptr);
  t.join();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->layers, b->layers);
  EXPECT_EQ(Hits(blob), 1);
  EXPECT_EQ((*store)->fetch_stats().bytes, layer.size() + kConfig.size());
  std::lock_guard<std::mutex> l(mu);
  // The pull that downloaded reports; one that waited may report nothing.
  if (!messages.empty()) {
    EXPECT_THAT(messages.front(),
                ::testing::MatchesRegex("pulling .*/r/x:1: [0-9]+ MiB of 3 MiB \\([0-9]+%\\)"));
  }
}

TEST_F(HostileRegistryTest, ProgressIsReportedAboutOnceASecond) {
  std::string layer(3 << 20, '\0');
  for (size_t i = 0; i < layer.size(); ++i) layer[i] = static_cast<char>(i * 7 % 253);
  ServeImage(Digest(layer), layer.size());
  Serve("/v2/r/x/blobs/" + Digest(layer), [layer](const std::string&) {
    return Reply{.body = layer, .piece_bytes = 256 << 10, .pace = std::chrono::milliseconds(200)};
  });
  auto store = ImageStore::Open({.dir = dir_, .insecure_registries = {Host()}});
  ASSERT_TRUE(store.ok());
  std::vector<std::string> messages;
  const auto start = std::chrono::steady_clock::now();
  Result<PulledImage> img =
      (*store)->Pull(Host() + "/r/x:1", [&](const std::string& m) { messages.push_back(m); });
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  // At least ~2.2 s of download: reported, but at most once a second
  // however long it took (not once per piece).
  ASSERT_FALSE(messages.empty());
  EXPECT_LE(messages.size(), static_cast<size_t>(seconds.count()) + 1);
  EXPECT_THAT(messages.front(),
              ::testing::MatchesRegex("pulling .*/r/x:1: [0-9]+ MiB of 3 MiB \\([0-9]+%\\)"));
}

TEST_F(HostileRegistryTest, PartialDownloadResumesWithRangeAnd206) {
  ServeImage(Digest(kLayer), kLayer.size());
  const std::string blob = "/v2/r/x/blobs/" + Digest(kLayer);
  const std::string total = std::to_string(kLayer.size());
  Serve(blob, [&](const std::string&) {
    return Reply{.status = 206,
                 .reason = "Partial Content",
                 .body = kLayer.substr(10),
                 .headers = {{"Content-Range",
                              "bytes 10-" + std::to_string(kLayer.size() - 1) + "/" + total}}};
  });
  fs::create_directories(dir_ + "/partial");
  std::ofstream(PartialPath(Digest(kLayer)), std::ios::binary) << kLayer.substr(0, 10);
  auto store = ImageStore::Open({.dir = dir_, .insecure_registries = {Host()}});
  ASSERT_TRUE(store.ok());
  Result<PulledImage> img = (*store)->Pull(Host() + "/r/x:1", nullptr);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_THAT(Head(blob), HasSubstr("range:bytes=10-"));
  EXPECT_EQ((*store)->fetch_stats().bytes, kConfig.size() + kLayer.size() - 10);
  EXPECT_FALSE(fs::exists(PartialPath(Digest(kLayer))));
}

TEST_F(HostileRegistryTest, A206FromTheWrongOffsetIsRefused) {
  ServeImage(Digest(kLayer), kLayer.size());
  const std::string blob = "/v2/r/x/blobs/" + Digest(kLayer);
  Serve(blob, [&](const std::string&) {
    return Reply{
        .status = 206,
        .reason = "Partial Content",
        .body = kLayer.substr(5),
        .headers = {{"Content-Range", "bytes 5-" + std::to_string(kLayer.size() - 1) + "/*"}}};
  });
  fs::create_directories(dir_ + "/partial");
  std::ofstream(PartialPath(Digest(kLayer)), std::ios::binary) << kLayer.substr(0, 10);
  Result<PulledImage> img = Pull();
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kUnavailable) << img.status().ToString();
  EXPECT_FALSE(fs::exists(BlobPath(Digest(kLayer))));
}

// Basic credentials go to the registry, and not to the storage it
// redirects a blob to (another origin).
TEST_F(HostileRegistryTest, CredentialsAreNotSentToARedirectTarget) {
  std::mutex mu;
  std::string storage_head;
  Server storage([&](const std::string&, const std::string& head) {
    std::lock_guard<std::mutex> l(mu);
    storage_head = Lower(head);
    return Reply{.body = kLayer};
  });
  const std::string manifest = Manifest(kConfig, {{Digest(kLayer), kLayer.size()}});
  const std::string blob = "/v2/r/x/blobs/" + Digest(kLayer);
  const std::string signed_url = storage.Url("/bucket/layer?sig=abc");
  auto authed = [](const std::string& head) {
    return head.find("authorization:basic ") != std::string::npos;
  };
  Serve("/v2/r/x/manifests/1", [&](const std::string& path) {
    if (!authed(Head(path))) {
      return Reply{.status = 401,
                   .reason = "Unauthorized",
                   .headers = {{"WWW-Authenticate", "Basic realm=\"test\""}}};
    }
    return Reply{.body = manifest};
  });
  ServeBody("/v2/r/x/blobs/" + Digest(kConfig), kConfig);
  Serve(blob, [&](const std::string&) {
    return Reply{
        .status = 307, .reason = "Temporary Redirect", .headers = {{"Location", signed_url}}};
  });
  const std::string config = dir_ + "-config.json";
  std::ofstream(config) << R"({"auths":{")" << Host() << R"(":{"username":"u","password":"p"}}})";
  auto store = ImageStore::Open(
      {.dir = dir_, .docker_config_path = config, .insecure_registries = {Host()}});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Result<PulledImage> img = (*store)->Pull(Host() + "/r/x:1", nullptr);
  fs::remove(config);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_TRUE(authed(Head(blob)));
  std::lock_guard<std::mutex> l(mu);
  EXPECT_THAT(storage_head, HasSubstr("get /bucket/layer?sig=abc"));
  EXPECT_THAT(storage_head, ::testing::Not(HasSubstr("authorization")));
}

TEST_F(HostileRegistryTest, CollectGarbageRemovesAbandonedDownloadsButNotRunningOnes) {
  auto store = ImageStore::Open({.dir = dir_});
  ASSERT_TRUE(store.ok());
  const std::string partial = dir_ + "/partial/";
  std::ofstream(partial + "abandoned.partial") << "12345";  // a crashed Pull's
  std::ofstream(partial + "orphan.lock") << "";             // a crashed Pull's lock
  std::ofstream(partial + "running.partial") << "678";
  Result<BlobLock> running =
      BlobLock::Acquire(partial + "running.lock", std::chrono::steady_clock::now());
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  Result<uint64_t> freed = (*store)->CollectGarbage({});
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_EQ(*freed, 5u);
  EXPECT_FALSE(fs::exists(partial + "abandoned.partial"));
  EXPECT_FALSE(fs::exists(partial + "orphan.lock"));
  EXPECT_TRUE(fs::exists(partial + "running.partial"));
  EXPECT_TRUE(fs::exists(partial + "running.lock"));
}

// cpprestsdk hands the body on in chunks (256 KiB): a connection cut after
// 600 KiB of a 1 MiB layer leaves whole chunks in .partial, and the retry
// asks for the rest from there.
TEST_F(HostileRegistryTest, AConnectionCutShortIsResumedWithinThePull) {
  std::string layer(1 << 20, '\0');
  for (size_t i = 0; i < layer.size(); ++i) layer[i] = static_cast<char>(i * 31 % 241);
  ServeImage(Digest(layer), layer.size());
  const std::string blob = "/v2/r/x/blobs/" + Digest(layer);
  auto offsets = std::make_shared<std::vector<uint64_t>>();
  Serve(blob, [=, this](const std::string& path) {
    const std::string head = Head(path);
    const size_t at = head.find("range:bytes=");
    if (at == std::string::npos) {  // says the whole size, sends 600 KiB, closes
      return Reply{.body = layer.substr(0, 600 << 10),
                   .content_length = false,
                   .headers = {{"Content-Length", std::to_string(layer.size())}}};
    }
    const uint64_t from = std::stoull(head.substr(at + 12));
    offsets->push_back(from);
    return Reply{.status = 206,
                 .reason = "Partial Content",
                 .body = layer.substr(from),
                 .headers = {{"Content-Range", "bytes " + std::to_string(from) + "-" +
                                                   std::to_string(layer.size() - 1) + "/" +
                                                   std::to_string(layer.size())}}};
  });
  auto store = ImageStore::Open({.dir = dir_, .insecure_registries = {Host()}});
  ASSERT_TRUE(store.ok());
  Result<PulledImage> img = (*store)->Pull(Host() + "/r/x:1", nullptr);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  EXPECT_EQ(Hits(blob), 2);
  ASSERT_EQ(offsets->size(), 1u);
  EXPECT_GT(offsets->front(), 0u);          // some of the cut transfer was kept
  EXPECT_LE(offsets->front(), 600u << 10);  // and no more than was sent
  EXPECT_EQ((*store)->fetch_stats().bytes, kConfig.size() + layer.size() - offsets->front());
  ExpectStoredAs(BlobPath(Digest(layer)), layer);
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
