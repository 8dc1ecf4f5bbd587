// TarReader over archives built in memory: ustar, PAX and GNU long names,
// xattrs, nanosecond mtimes, base-256 numbers, and hostile streams
// (truncated, bad checksum, unsupported types, oversized metadata).
#include "noderuntime/oci/tar_reader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "noderuntime/oci/tar_test_writer.h"

namespace kubicle::noderuntime::oci {
namespace {

// Memory as a ByteSource, handing out at most `step` bytes per call so the
// reader's short-read paths run.
class MemSource : public ByteSource {
 public:
  explicit MemSource(std::string data, size_t step = 7) : data_(std::move(data)), step_(step) {}
  Result<size_t> Read(char* buf, size_t max) override {
    const size_t n = std::min({max, step_, data_.size() - at_});
    std::memcpy(buf, data_.data() + at_, n);
    at_ += n;
    return n;
  }

 private:
  std::string data_;
  size_t step_;
  size_t at_ = 0;
};

struct Read {
  std::vector<TarEntry> entries;
  std::vector<std::string> data;
  Status status;
};

Read ReadAll(const std::string& archive, TarLimits limits = {}) {
  MemSource src(archive);
  TarReader r(&src, limits);
  Read out;
  TarEntry e;
  for (;;) {
    auto more = r.Next(&e);
    if (!more.ok()) {
      out.status = more.status();
      return out;
    }
    if (!*more) return out;
    std::string d;
    char buf[100];
    for (;;) {
      auto n = r.ReadData(buf, sizeof(buf));
      if (!n.ok()) {
        out.status = n.status();
        return out;
      }
      if (*n == 0) break;
      d.append(buf, *n);
    }
    out.entries.push_back(e);
    out.data.push_back(d);
  }
}

TEST(TarReaderTest, ReadsUstarEntriesAndTheirData) {
  TarTestWriter w;
  w.Dir("etc/", 0755)
      .File("etc/hostname", "box\n", 0644)
      .Symlink("bin", "usr/bin")
      .HardLink("etc/h2", "etc/hostname");
  TestEntry dev;
  dev.path = "dev/null";
  dev.flag = '3';
  w.Add(dev);
  const Read r = ReadAll(w.Finish());
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(r.entries.size(), 5u);
  EXPECT_EQ(r.entries[0].type, TarType::kDirectory);
  EXPECT_EQ(r.entries[1].path, "etc/hostname");
  EXPECT_EQ(r.entries[1].size, 4u);
  EXPECT_EQ(r.data[1], "box\n");
  EXPECT_EQ(r.entries[1].mtime_sec, 1700000000);
  EXPECT_EQ(r.entries[2].type, TarType::kSymlink);
  EXPECT_EQ(r.entries[2].link_target, "usr/bin");
  EXPECT_EQ(r.entries[3].type, TarType::kHardLink);
  EXPECT_EQ(r.entries[3].link_target, "etc/hostname");
  EXPECT_EQ(r.entries[4].type, TarType::kCharDevice);
}

TEST(TarReaderTest, PaxAndGnuLongNamesXattrsAndNanoseconds) {
  const std::string long_path = std::string(150, 'a') + "/" + std::string(120, 'b');
  TarTestWriter w;
  TestEntry pax;
  pax.path = long_path;
  pax.content = "x";
  pax.mtime_pax = "1700000001.25";
  pax.xattrs = {{"security.capability", std::string("\x01\x00\x00\x02", 4)}, {"user.k", "v"}};
  w.Add(pax);
  TestEntry gnu;
  gnu.path = long_path + "-gnu";
  gnu.gnu_long_name = true;
  gnu.content = "yy";
  w.Add(gnu);
  TestEntry neg;
  neg.path = "old";
  neg.mtime_pax = "-1.5";
  w.Add(neg);
  const Read r = ReadAll(w.Finish());
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(r.entries.size(), 3u);
  EXPECT_EQ(r.entries[0].path, long_path);
  EXPECT_EQ(r.entries[0].mtime_sec, 1700000001);
  EXPECT_EQ(r.entries[0].mtime_nsec, 250000000u);
  ASSERT_EQ(r.entries[0].xattrs.size(), 2u);
  EXPECT_EQ(r.entries[0].xattrs[0].first, "security.capability");
  EXPECT_EQ(r.entries[0].xattrs[0].second, std::string("\x01\x00\x00\x02", 4));
  EXPECT_EQ(r.data[0], "x");
  EXPECT_EQ(r.entries[1].path, long_path + "-gnu");
  EXPECT_EQ(r.data[1], "yy");
  EXPECT_EQ(r.entries[2].mtime_sec, -2);
  EXPECT_EQ(r.entries[2].mtime_nsec, 500000000u);
}

TEST(TarReaderTest, Base256UidAndPrefixField) {
  std::string h = TarHeader("name", '0', 0644, 0);
  // uid 2^24 in GNU base-256; a ustar prefix.
  std::memset(h.data() + 108, 0, 8);
  h[108] = static_cast<char>(0x80);
  h[112] = 1;
  std::memcpy(h.data() + 345, "some/prefix", 11);
  SetTarChecksum(h);
  const Read r = ReadAll(TarTestWriter().Raw(h).Finish());
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.entries[0].uid, 1u << 24);
  EXPECT_EQ(r.entries[0].path, "some/prefix/name");
}

TEST(TarReaderTest, EndsCleanlyWithoutZeroBlocks) {
  TarTestWriter w;
  w.File("a", "1");
  const Read r = ReadAll(w.bytes());
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.entries.size(), 1u);
}

TEST(TarReaderTest, TruncatedStreamsAreDataLoss) {
  TarTestWriter w;
  w.File("a", std::string(1000, 'z'));
  const std::string full = w.bytes();
  for (size_t cut : {size_t{100}, size_t{511}, size_t{600}, size_t{1400}}) {
    const Read r = ReadAll(full.substr(0, cut));
    EXPECT_EQ(r.status.code(), StatusCode::kDataLoss) << cut << ": " << r.status.ToString();
    EXPECT_NE(r.status.message().find("truncated"), std::string::npos) << r.status.message();
  }
}

TEST(TarReaderTest, BadChecksumIsRefused) {
  std::string h = TarHeader("a", '0', 0644, 0);
  h[0] = 'b';  // the checksum no longer matches
  const Read r = ReadAll(TarTestWriter().Raw(h).Finish());
  EXPECT_EQ(r.status.code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status.message().find("checksum"), std::string::npos);
}

TEST(TarReaderTest, UnsupportedTypesAreNamed) {
  const Read r = ReadAll(TarTestWriter().Raw(TarHeader("sparse", 'S', 0644, 0)).Finish());
  EXPECT_EQ(r.status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status.message().find("'S'"), std::string::npos) << r.status.message();
  EXPECT_NE(r.status.message().find("sparse"), std::string::npos);
}

TEST(TarReaderTest, MetadataOverItsLimitIsRefusedBeforeItIsRead) {
  // A PAX header announcing 1 GiB: refused from the header alone.
  const Read r = ReadAll(TarTestWriter().Raw(TarHeader("x", 'x', 0644, 1ull << 30)).bytes());
  EXPECT_EQ(r.status.code(), StatusCode::kResourceExhausted);
  TarLimits small;
  small.max_path_bytes = 50;
  TestEntry e;
  e.path = std::string(120, 'p');
  const Read r2 = ReadAll(TarTestWriter().Add(e).Finish(), small);
  EXPECT_EQ(r2.status.code(), StatusCode::kInvalidArgument);
}

TEST(TarReaderTest, EndlessMetadataHeadersAreRefused) {
  TarTestWriter w;
  for (int i = 0; i < 20; ++i) {
    const std::string rec = "11 uid=123\n";
    w.Raw(TarHeader("x", 'x', 0644, rec.size()) + rec + std::string(512 - rec.size(), '\0'));
  }
  const Read r = ReadAll(w.Finish());
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
}

TEST(TarReaderTest, MalformedPaxRecords) {
  for (const std::string recs :
       {"5 a=b\n", "99 path=x\n", "x path=y\n", "9 =value\n", "12 mtime=1.x\n"}) {
    TarEntry e;
    PaxSeen seen;
    EXPECT_FALSE(ApplyPaxRecords(recs, TarLimits{}, &e, &seen).ok()) << recs;
  }
  TarEntry e;
  PaxSeen seen;
  ASSERT_TRUE(ApplyPaxRecords("16 path=a/b/c/d\n13 uid=65536\n", TarLimits{}, &e, &seen).ok());
  EXPECT_EQ(e.path, "a/b/c/d");
  EXPECT_EQ(e.uid, 65536u);
  EXPECT_TRUE(seen.uid);
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
