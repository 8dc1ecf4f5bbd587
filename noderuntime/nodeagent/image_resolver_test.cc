// ImageResolver against a real temp directory and a real HTTP server on
// 127.0.0.1 (testing/http_test_server.h: each test scripts its replies and
// counts requests and bytes sent).
#include "noderuntime/nodeagent/image_resolver.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <atomic>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sha256.h"
#include "noderuntime/nodeagent/testing/http_test_server.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string HexOf(const std::string& data) {
  return Sha256Hex(data);
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

using Reply = TestHttpReply;
using TestServer = TestHttpServer;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Collects progress messages (called from cpprestsdk threads).
struct Progress {
  std::mutex mu;
  std::vector<std::string> messages;
  ProgressFn Fn() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> l(mu);
      messages.push_back(m);
    };
  }
};

class ImageResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-images-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = fs::canonical(tmpl).string();
    root_ = dir_ + "/root";
    cache_ = dir_ + "/cache";
    outside_ = dir_ + "/outside";
    fs::create_directories(root_);
    fs::create_directories(outside_);
    WriteFile(root_ + "/vmlinux", "kernel bytes");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ImageResolver> Make(std::vector<std::string> roots = {},
                                      uint64_t max_bytes = 16ull << 30,
                                      std::chrono::seconds timeout = std::chrono::seconds(30)) {
    ImageResolverOptions o;
    o.roots = roots.empty() ? std::vector<std::string>{root_} : std::move(roots);
    o.cache_dir = cache_;
    o.max_download_bytes = max_bytes;
    o.download_timeout = timeout;
    return std::make_unique<ImageResolver>(std::move(o));
  }

  Result<std::string> Local(const std::string& source, const std::string& sha256 = "") {
    return Make()->Resolve({"kernel", source, sha256}, nullptr);
  }

  std::vector<std::string> CacheEntries() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_, ec)) out.push_back(e.path().filename());
    return out;
  }

  std::string dir_, root_, cache_, outside_;
};

TEST_F(ImageResolverTest, PathInsideRootResolves) {
  auto r = Local(root_ + "/vmlinux");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, root_ + "/vmlinux");
  // Lexically odd but harmless spellings resolve to the same file.
  r = Local(root_ + "//./vmlinux");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, root_ + "/vmlinux");
}

TEST_F(ImageResolverTest, FileUrlResolves) {
  auto r = Local("file://" + root_ + "/vmlinux");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, root_ + "/vmlinux");
  auto host = Local("file://somehost" + root_ + "/vmlinux");
  EXPECT_EQ(host.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(host.status().message(), HasSubstr("file:///absolute/path"));
}

TEST_F(ImageResolverTest, SymlinkInsideRootToASiblingInsideResolves) {
  fs::create_symlink(root_ + "/vmlinux", root_ + "/current");
  auto r = Local(root_ + "/current");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, root_ + "/vmlinux");
}

TEST_F(ImageResolverTest, PathOutsideRootsIsDenied) {
  WriteFile(outside_ + "/secret", "s");
  auto r = Local(outside_ + "/secret");
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(r.status().message(), "kernel \"" + outside_ + "/secret\" is outside the node's image "
                                  "roots (" + root_ + ")");
  // A missing file outside the roots gets the same answer: no probing.
  EXPECT_EQ(Local("/etc/no-such-file").status().code(), StatusCode::kPermissionDenied);
}

TEST_F(ImageResolverTest, SymlinkEscapingRootIsDenied) {
  WriteFile(outside_ + "/secret", "s");
  fs::create_symlink(outside_ + "/secret", root_ + "/link");
  auto r = Local(root_ + "/link");
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(r.status().message(), HasSubstr("is outside the node's image roots"));
  EXPECT_THAT(r.status().message(), HasSubstr("resolves to " + outside_ + "/secret"));
  // Also through a symlinked directory.
  fs::create_directory_symlink(outside_, root_ + "/dirlink");
  EXPECT_EQ(Local(root_ + "/dirlink/secret").status().code(), StatusCode::kPermissionDenied);
}

TEST_F(ImageResolverTest, DotDotIsRejected) {
  auto r = Local(root_ + "/../root/vmlinux");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("\"..\""));
  EXPECT_THAT(r.status().message(), StartsWith("kernel \"" + root_ + "/../root/vmlinux\""));
  EXPECT_EQ(Local("file://" + root_ + "/..").status().code(), StatusCode::kInvalidArgument);
  // "..x" is a name, not a parent reference.
  WriteFile(root_ + "/..x", "k");
  EXPECT_TRUE(Local(root_ + "/..x").ok());
}

TEST_F(ImageResolverTest, RelativePathIsRejected) {
  auto r = Local("root/vmlinux");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), StartsWith("kernel \"root/vmlinux\" is not an absolute path"));
}

TEST_F(ImageResolverTest, DeviceIsRejected) {
  // Through a symlink in the root: /dev/null is outside the root.
  fs::create_symlink("/dev/null", root_ + "/null");
  EXPECT_EQ(Local(root_ + "/null").status().code(), StatusCode::kPermissionDenied);
  // With /dev as a root, it is inside, and still not a regular file.
  auto r = Make({"/dev"})->Resolve({"rootfs", "/dev/null", ""}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "rootfs \"/dev/null\" is not a regular file (it is a character device)");
}

TEST_F(ImageResolverTest, DirectoryIsRejected) {
  fs::create_directories(root_ + "/sub");
  auto r = Local(root_ + "/sub");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("is not a regular file (it is a directory)"));
  EXPECT_EQ(Local(root_).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ImageResolverTest, MissingFileIsNotFound) {
  auto r = Local(root_ + "/missing");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "kernel \"" + root_ + "/missing\" does not exist on this node");
  fs::create_symlink(root_ + "/gone", root_ + "/dangling");
  EXPECT_EQ(Local(root_ + "/dangling").status().code(), StatusCode::kNotFound);
}

TEST_F(ImageResolverTest, MissingOrRelativeRootIsSkipped) {
  auto resolver = Make({dir_ + "/not-yet", "relative/root", root_});
  auto r = resolver->Resolve({"initrd", dir_ + "/not-yet/initrd", ""}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(r.status().message(),
              HasSubstr("is outside the node's image roots (" + dir_ + "/not-yet, " + root_ + ")"));
  EXPECT_TRUE(resolver->Resolve({"kernel", root_ + "/vmlinux", ""}, nullptr).ok());
  // The root appearing later is picked up.
  fs::create_directories(dir_ + "/not-yet");
  WriteFile(dir_ + "/not-yet/initrd", "i");
  EXPECT_TRUE(resolver->Resolve({"initrd", dir_ + "/not-yet/initrd", ""}, nullptr).ok());
}

TEST_F(ImageResolverTest, LocalSha256IsVerified) {
  EXPECT_TRUE(Local(root_ + "/vmlinux", HexOf("kernel bytes")).ok());
  const std::string wrong = HexOf("other bytes");
  auto r = Local(root_ + "/vmlinux", wrong);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("expected " + wrong));
  EXPECT_THAT(r.status().message(), HasSubstr("got " + HexOf("kernel bytes")));
  EXPECT_EQ(Local(root_ + "/vmlinux", "ABC").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ImageResolverTest, OciIsUnimplemented) {
  auto r = Local("oci://registry.example/kernels/vmlinux:6.1");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(r.status().message(),
            "oci:// images are not supported yet by kubicle-node; use a path under an image root "
            "or an http(s) URL with a sha256");
}

TEST_F(ImageResolverTest, UnsupportedSourcesAreInvalid) {
  for (const std::string s : {"", "ftp://example.com/vmlinux", "vmlinux", "file:relative"}) {
    auto r = Local(s);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(r.status().message(), StartsWith("kernel")) << s;
  }
  EXPECT_THAT(Local("ftp://example.com/vmlinux").status().message(),
              HasSubstr("unsupported scheme ftp://"));
}

TEST_F(ImageResolverTest, HttpNeedsSha256) {
  auto r = Local("http://127.0.0.1:1/vmlinux");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("spec.kernelSha256"));
  EXPECT_EQ(Local("https://example.com/vmlinux", "../../etc/passwd").status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ImageResolverTest, HttpDownloadsOnceThenUsesTheCache) {
  const std::string body(3 << 20, 'r');
  TestServer server([&](const std::string& path) { return Reply{.body = body}; });
  auto resolver = Make();
  Progress progress;
  const ImageSource src{"rootfs", server.Url("/rootfs.ext4"), HexOf(body)};

  auto r = resolver->Resolve(src, progress.Fn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, cache_ + "/" + HexOf(body));
  EXPECT_EQ(ReadFile(*r), body);
  EXPECT_EQ(server.requests(), 1);
  EXPECT_EQ(CacheEntries(), std::vector<std::string>{HexOf(body)});
  ASSERT_GE(progress.messages.size(), 2u);
  EXPECT_THAT(progress.messages.front(), StartsWith("downloading rootfs: "));
  EXPECT_THAT(progress.messages.front(), HasSubstr(" of 3 MiB ("));
  EXPECT_EQ(progress.messages.back(), "downloaded rootfs: 3 MiB, sha256 verified");

  // A second resolver (a restarted agent) on the same cache: no request.
  auto again = Make()->Resolve(src, nullptr);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *r);
  EXPECT_EQ(server.requests(), 1);
}

TEST_F(ImageResolverTest, HttpSha256MismatchLeavesNothingInTheCache) {
  TestServer server([](const std::string&) { return Reply{.body = "tampered"}; });
  const std::string want = HexOf("original");
  auto r = Make()->Resolve({"kernel", server.Url("/vmlinux"), want}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("expected " + want + ", got " + HexOf("tampered")));
  EXPECT_THAT(r.status().message(), StartsWith("kernel \"" + server.Url("/vmlinux") + "\""));
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(ImageResolverTest, HttpErrorStatusIsUnavailable) {
  TestServer server([](const std::string&) {
    return Reply{.status = 404, .reason = "Not Found", .body = "no such image"};
  });
  auto r = Make()->Resolve({"kernel", server.Url("/missing"), HexOf("x")}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("HTTP 404 Not Found"));
  EXPECT_THAT(r.status().message(), HasSubstr(server.Url("/missing")));
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(ImageResolverTest, ConnectionRefusedIsUnavailable) {
  int port;
  {
    TestServer closed([](const std::string&) { return Reply{}; });
    port = std::stoi(closed.Url("").substr(std::string("http://127.0.0.1:").size()));
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/vmlinux";
  auto r = Make()->Resolve({"kernel", url, HexOf("x")}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr(url));
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(ImageResolverTest, SizeCapFromContentLength) {
  const std::string body(2 << 20, 'b');
  TestServer server([&](const std::string&) { return Reply{.body = body}; });
  auto r = Make({}, 1 << 20)->Resolve({"rootfs", server.Url("/big"), HexOf(body)}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("more than the limit of 1048576 bytes"));
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(ImageResolverTest, SizeCapWhileStreamingAbortsEarly) {
  // No Content-Length and 1 GiB on offer: the client must hang up soon after
  // the first MiB, not read it all.
  TestServer server([](const std::string&) { return Reply{.stream_bytes = 1ull << 30}; });
  auto start = std::chrono::steady_clock::now();
  auto r = Make({}, 1 << 20)->Resolve({"rootfs", server.Url("/endless"), HexOf("x")}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("more than the limit of 1048576 bytes"));
  EXPECT_LT(server.bytes_sent(), 64ull << 20);  // socket buffers, not the whole body
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(ImageResolverTest, RedirectsAreFollowedUpToFive) {
  const std::string body = "redirected kernel";
  TestServer server([&](const std::string& path) {
    if (path == "/final") return Reply{.body = body};
    int n = std::stoi(path.substr(1));  // "/3" redirects to "/2" ... "/0" to "/final"
    std::string next = n == 0 ? "/final" : "/" + std::to_string(n - 1);
    return Reply{.status = 302, .reason = "Found", .body = "moved",
                 .headers = {{"Location", next}}};
  });
  auto ok = Make()->Resolve({"kernel", server.Url("/4"), HexOf(body)}, nullptr);  // 5 redirects
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ReadFile(*ok), body);

  fs::remove_all(cache_);
  auto r = Make()->Resolve({"kernel", server.Url("/5"), HexOf(body)}, nullptr);  // 6 redirects
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("more than 5 redirects"));
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(ImageResolverTest, ConcurrentResolvesOfOneUrlDownloadOnce) {
  const std::string body(1 << 20, 'c');
  TestServer server([&](const std::string&) {
    return Reply{.body = body, .delay = std::chrono::milliseconds(300)};
  });
  auto resolver = Make();
  const ImageSource src{"rootfs", server.Url("/rootfs"), HexOf(body)};
  std::vector<Result<std::string>> results(4, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] { results[i] = resolver->Resolve(src, nullptr); });
  for (auto& t : threads) t.join();
  for (auto& res : results) {
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_EQ(*res, cache_ + "/" + HexOf(body));
  }
  EXPECT_EQ(server.requests(), 1);
}

TEST_F(ImageResolverTest, ConcurrentWaitersShareTheLeadersFailure) {
  // The leader's download fails only once both others wait for it (a late
  // thread would otherwise lead a second download of its own).
  std::atomic<int> waiting{0};
  TestServer server([&](const std::string&) {
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
         waiting < 2 && std::chrono::steady_clock::now() < end;)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return Reply{.status = 503, .reason = "Service Unavailable"};
  });
  auto resolver = Make();
  const ImageSource src{"rootfs", server.Url("/rootfs"), HexOf("x")};
  std::vector<Result<std::string>> results(3, Status::Internal("not run"));
  std::vector<std::thread> threads;
  auto progress = [&](const std::string& line) {
    if (line.rfind("waiting for another download", 0) == 0) ++waiting;
  };
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] { results[i] = resolver->Resolve(src, progress); });
  for (auto& t : threads) t.join();
  for (auto& res : results) EXPECT_EQ(res.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(server.requests(), 1);
}

TEST_F(ImageResolverTest, DownloadTimeoutIsDeadlineExceeded) {
  TestServer server([](const std::string&) {
    return Reply{.body = "late", .delay = std::chrono::seconds(20)};
  });
  auto start = std::chrono::steady_clock::now();
  auto r = Make({}, 1 << 20, std::chrono::seconds(1))
               ->Resolve({"kernel", server.Url("/slow"), HexOf("late")}, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(ImageResolverTest, StalePartialFilesAreRemoved) {
  const std::string body = "fresh";
  fs::create_directories(cache_);
  WriteFile(cache_ + "/" + HexOf(body) + ".partial-deadbeef", "half");
  TestServer server([&](const std::string&) { return Reply{.body = body}; });
  ASSERT_TRUE(Make()->Resolve({"kernel", server.Url("/k"), HexOf(body)}, nullptr).ok());
  EXPECT_EQ(CacheEntries(), std::vector<std::string>{HexOf(body)});
}

}  // namespace
}  // namespace kubicle::noderuntime::nodeagent
