// kubicle-ext4 and its client: the file operations on images made by
// mke2fs, the wire format's limits, images damaged at random (an error,
// never a crash or a hang), a file system needing journal recovery, and
// hostile helpers (oversized frames, garbage, silence past the deadline).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "noderuntime/ext4/ext4_client.h"
#include "noderuntime/ext4/ext4_fs.h"
#include "noderuntime/ext4/ext4_wire.h"

namespace kubicle::noderuntime::ext4 {
namespace {

namespace fs = std::filesystem;
using guest::protocol::Bytes;
using guest::protocol::ByteSpan;
using guest::protocol::FileType;

class Ext4Test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ext4_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    image_ = dir_ + "/disk.img";
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Mkfs(const std::string& extra = "", int mib = 16) {
    const std::string cmd = "mke2fs -q -F -t ext4 " + extra + " " + image_ + " " +
                            std::to_string(mib) + "M >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  Ext4Client Client(std::chrono::milliseconds deadline = std::chrono::milliseconds(30000)) {
    return Ext4Client({.helper = KUBICLE_EXT4_HELPER, .deadline = deadline});
  }
  Result<std::string> ReadAll(Ext4Client& c, const std::string& path) {
    std::string out;
    int chunks = 0;
    Status st = c.Read(image_, path, [&](const guest::client::FileChunk& ch) {
      if (chunks++ == 0 && !ch.file_size) return Status::Internal("no size on the first chunk");
      if (ch.offset != out.size()) return Status::Internal("chunk out of order");
      out.append(reinterpret_cast<const char*>(ch.data.data()), ch.data.size());
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return out;
  }
  static ByteSpan Span(const std::string& s) {
    return ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }

  std::string dir_, image_;
};

TEST(Ext4Wire, PathsAreCheckedAndRequestsRoundTrip) {
  EXPECT_TRUE(CheckPath("/").ok());
  EXPECT_TRUE(CheckPath("/a/b.txt").ok());
  for (const char* bad : {"", "a", "/a/../b", "/a/./b", "/a//b", "/a/", "/.."})
    EXPECT_EQ(CheckPath(bad).code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_FALSE(CheckPath("/" + std::string(256, 'x')).ok());
  EXPECT_FALSE(CheckPath(std::string(1, '/') + std::string(5000, 'a')).ok());
  EXPECT_EQ(Components("/a/b/c"), (std::vector<std::string>{"a", "b", "c"}));
  Request r{.op = Op::kWrite, .path = "/x/y", .mode = 0600, .recursive = false, .size = 12};
  auto enc = EncodeRequest(r);
  ASSERT_TRUE(enc.ok());
  auto dec = DecodeRequest(enc->substr(4));
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  EXPECT_EQ(*dec, r);
  EXPECT_FALSE(DecodeRequest(R"({"op":"write","path":"/x","size":99999999999})").ok());
  EXPECT_FALSE(DecodeRequest(R"({"op":"exec","path":"/x"})").ok());
  EXPECT_FALSE(DecodeRequest(R"({"op":"read","path":"/../etc/passwd"})").ok());
  EXPECT_FALSE(DecodeRequest("[").ok());
  EXPECT_FALSE(DecodeRequest(std::string(kMaxRequestHeader + 1, ' ')).ok());
}

TEST_F(Ext4Test, WriteReadStatListRemoveThroughTheHelper) {
  Mkfs();
  auto c = Client();
  ASSERT_TRUE(c.Write(image_, "/a/b/hello.txt", Span("hello workspace\n"), 0640).ok());
  std::string big(300000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(c.Write(image_, "/a/big.bin", Span(big), 0644).ok());
  auto got = ReadAll(c, "/a/b/hello.txt");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "hello workspace\n");
  auto got_big = ReadAll(c, "/a/big.bin");
  ASSERT_TRUE(got_big.ok());
  EXPECT_EQ(*got_big, big);
  // Truncate on rewrite.
  ASSERT_TRUE(c.Write(image_, "/a/big.bin", Span("short"), 0644).ok());
  EXPECT_EQ(*ReadAll(c, "/a/big.bin"), "short");
  ASSERT_TRUE(c.Write(image_, "/empty", Span(""), 0644).ok());
  EXPECT_EQ(*ReadAll(c, "/empty"), "");

  auto st = c.Stat(image_, "/a/b/hello.txt");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, FileType::kFile);
  EXPECT_EQ(st->size, 16u);
  EXPECT_EQ(st->mode, 0640u);
  EXPECT_EQ(c.Stat(image_, "/a")->type, FileType::kDirectory);
  EXPECT_EQ(c.Stat(image_, "/nope").status().code(), StatusCode::kNotFound);

  auto ls = c.List(image_, "/a", 1000);
  ASSERT_TRUE(ls.ok());
  std::set<std::string> names;
  for (const auto& e : *ls) names.insert(e.name);
  EXPECT_EQ(names, (std::set<std::string>{"b", "big.bin"}));
  EXPECT_EQ(c.List(image_, "/a/big.bin", 10).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.Read(image_, "/a", [](const auto&) { return Status::Ok(); }).code(),
            StatusCode::kFailedPrecondition);

  EXPECT_EQ(c.Remove(image_, "/a", false).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c.Remove(image_, "/a/big.bin", false).ok());
  ASSERT_TRUE(c.Remove(image_, "/a", true).ok());
  EXPECT_EQ(c.Stat(image_, "/a").status().code(), StatusCode::kNotFound);
  // The image is still a clean ext4 by e2fsck's word.
  EXPECT_EQ(std::system(("e2fsck -fn " + image_ + " >/dev/null 2>&1").c_str()), 0);
}

TEST_F(Ext4Test, ManyFilesInOneDirectoryAndAListCap) {
  Mkfs();
  auto c = Client();
  for (int i = 0; i < 200; ++i)
    ASSERT_TRUE(c.Write(image_, "/d/f" + std::to_string(i), Span("x"), 0644).ok()) << i;
  auto ls = c.List(image_, "/d", 100000);
  ASSERT_TRUE(ls.ok());
  EXPECT_EQ(ls->size(), 200u);
  EXPECT_EQ(c.List(image_, "/d", 50).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(std::system(("e2fsck -fn " + image_ + " >/dev/null 2>&1").c_str()), 0);
}

TEST_F(Ext4Test, ReadsWhatTheKernelsMke2fsWrote) {
  const std::string src = dir_ + "/src";
  fs::create_directories(src + "/sub");
  std::ofstream(src + "/sub/from-mkfs.txt") << "made by mke2fs -d\n";
  Mkfs("-d " + src);
  auto c = Client();
  EXPECT_EQ(*ReadAll(c, "/sub/from-mkfs.txt"), "made by mke2fs -d\n");
}

TEST_F(Ext4Test, AFullWorkspaceIsResourceExhausted) {
  Mkfs("", 8);
  auto c = Client();
  std::string big(12 << 20, 'z');
  EXPECT_EQ(c.Write(image_, "/big", Span(big), 0644).code(), StatusCode::kResourceExhausted);
}

TEST_F(Ext4Test, AFileSystemNeedingRecoveryIsRefused) {
  Mkfs();
  ASSERT_EQ(std::system(("debugfs -w -R 'feature needs_recovery' " + image_ + " >/dev/null 2>&1").c_str()), 0);
  auto c = Client();
  auto st = c.Stat(image_, "/");
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.status().message().find("recovery"), std::string::npos);
}

TEST_F(Ext4Test, NotAnExt4ImageIsDataLoss) {
  { std::ofstream(image_) << std::string(1 << 20, 'x'); }
  auto c = Client();
  EXPECT_EQ(c.Stat(image_, "/").status().code(), StatusCode::kDataLoss);
}

// Random damage to the metadata of a populated image: every call ends in
// an answer (ok or an error), never a crash of this process or a hang.
TEST_F(Ext4Test, DamagedImagesGiveErrorsNotCrashes) {
  Mkfs("", 8);
  {
    auto c = Client();
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE(c.Write(image_, "/d" + std::to_string(i % 4) + "/f" + std::to_string(i),
                          Span(std::string(5000 + i, 'q')), 0644).ok());
  }
  const std::string pristine = dir_ + "/pristine.img";
  fs::copy_file(image_, pristine);
  std::mt19937_64 rng(1234);
  int errors = 0, oks = 0;
  for (int round = 0; round < 40; ++round) {
    fs::copy_file(pristine, image_, fs::copy_options::overwrite_existing);
    {
      int fd = ::open(image_.c_str(), O_RDWR);
      ASSERT_GE(fd, 0);
      for (int k = 0; k < 64; ++k) {
        // Mostly the first 1 MiB: superblock, group descriptors, bitmaps,
        // inode tables and the first directories live there.
        const off_t off = static_cast<off_t>(rng() % (1 << 20));
        const uint8_t b = static_cast<uint8_t>(rng());
        ASSERT_EQ(::pwrite(fd, &b, 1, off), 1);
      }
      ::close(fd);
    }
    auto c = Client(std::chrono::milliseconds(20000));
    for (const std::string& p : {std::string("/d1/f5"), std::string("/d2")}) {
      auto st = c.Stat(image_, p);
      (st.ok() ? oks : errors)++;
      auto ls = c.List(image_, "/d2", 1000);
      (ls.ok() ? oks : errors)++;
      Status r = c.Read(image_, p, [](const auto&) { return Status::Ok(); });
      (r.ok() ? oks : errors)++;
      Status w = c.Write(image_, "/d3/new", Span("n"), 0644);
      (w.ok() ? oks : errors)++;
      Status rm = c.Remove(image_, "/d0", true);
      (rm.ok() ? oks : errors)++;
      for (const Status& s : {st.status(), ls.status(), r, w, rm})
        EXPECT_NE(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    }
  }
  EXPECT_GT(errors, 0) << "random damage was never noticed";
  RecordProperty("oks", oks);
  RecordProperty("errors", errors);
}

class HostileHelper : public Ext4Test {
 protected:
  std::string Script(const std::string& body) {
    const std::string p = dir_ + "/helper.sh";
    // The helper answers on fd 0, the socket (stdout is /dev/null).
    std::ofstream(p) << "#!/bin/sh\nexec 1>&0\n" << body << "\n";
    ::chmod(p.c_str(), 0755);
    return p;
  }
};

TEST_F(HostileHelper, OversizedFramesGarbageAndSilenceAreRefused) {
  Mkfs("", 8);
  auto run = [&](const std::string& body, std::chrono::milliseconds deadline = std::chrono::milliseconds(5000)) {
    Ext4Client c({.helper = Script(body), .deadline = deadline});
    return c.Stat(image_, "/").status();
  };
  // A JSON frame announcing 2 GiB: refused before any of it is read.
  Status s = run(R"(printf 'J\377\377\377\177'; sleep 5)");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("over 1 MiB"), std::string::npos) << s.ToString();
  EXPECT_EQ(run(R"(printf 'D\377\377\000\000')").code(), StatusCode::kDataLoss);
  EXPECT_EQ(run(R"(printf 'X\001\000\000\000x')").code(), StatusCode::kDataLoss);
  EXPECT_EQ(run(R"(printf 'J\003\000\000\000{{{')").code(), StatusCode::kDataLoss);
  EXPECT_EQ(run("exit 0").code(), StatusCode::kDataLoss);
  EXPECT_EQ(run(R"(printf 'J\076\000\000\000{"error":{"code":99,"message":"made up code, 63 bytes long."}}')").code(),
            StatusCode::kDataLoss);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run("exec sleep 30", std::chrono::milliseconds(300)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "killed at its deadline";
}

}  // namespace
}  // namespace kubicle::noderuntime::ext4
