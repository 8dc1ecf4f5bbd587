#include "common/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace kubicle {
namespace {

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-file-io-XXXXXX";
    fd_ = UniqueFd(::mkstemp(tmpl));
    ASSERT_TRUE(fd_);
    path_ = tmpl;
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  UniqueFd fd_;
  std::string path_;
};

TEST_F(FileIoTest, TransfersEveryVectorIncludingEmptyOnes) {
  std::string a = "hello ", b = "world", c(100000, 'x');
  std::vector<iovec> out = {{a.data(), a.size()}, {nullptr, 0}, {b.data(), b.size()},
                            {c.data(), c.size()}};
  ASSERT_TRUE(TransferAll(fd_.get(), 10, out, /*write=*/true, "short").ok());
  std::string x(6, 0), y(5, 0), z(100000, 0);
  std::vector<iovec> in = {{x.data(), x.size()}, {y.data(), y.size()}, {z.data(), z.size()}};
  ASSERT_TRUE(TransferAll(fd_.get(), 10, in, /*write=*/false, "short").ok());
  EXPECT_EQ(x + y, "hello world");
  EXPECT_EQ(z, c);
}

TEST_F(FileIoTest, WriteAllAtWritesEveryByteWhereItIsTold) {
  const std::string big(3 << 20, 'y');
  ASSERT_TRUE(WriteAllAt(fd_.get(), 4, big.data(), big.size()).ok());
  ASSERT_TRUE(WriteAllAt(fd_.get(), 0, "abcd", 4).ok());
  ASSERT_TRUE(WriteAllAt(fd_.get(), 2, "", 0).ok()) << "nothing to write";
  auto all = ReadFileToString(path_);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, "abcd" + big);
  EXPECT_EQ(WriteAllAt(-1, 0, "x", 1).code(), StatusCode::kInternal);  // EBADF
}

TEST_F(FileIoTest, AReadPastTheEndIsDataLossWithTheCallersWords) {
  ASSERT_EQ(::pwrite(fd_.get(), "abc", 3, 0), 3);
  std::string buf(10, 0);
  iovec v{buf.data(), buf.size()};
  Status st = TransferAll(fd_.get(), 0, {&v, 1}, false, "layer shorter than its header");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(st.message(), "layer shorter than its header");
  EXPECT_EQ(buf.substr(0, 3), "abc") << "what was there was read";
}

TEST_F(FileIoTest, ReadFileToStringRefusesWhatIsBeyondItsLimit) {
  ASSERT_EQ(::pwrite(fd_.get(), "0123456789", 10, 0), 10);
  auto all = ReadFileToString(path_, 10);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, "0123456789");
  EXPECT_EQ(ReadFileToString(path_, 9).status().code(), StatusCode::kOutOfRange);
  // A file with no size to check first (a character device) is cut off
  // while reading, not read forever.
  EXPECT_EQ(ReadFileToString("/dev/zero", 1 << 16).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ReadFileToString(path_ + ".missing").status().code(), StatusCode::kNotFound);
}

TEST(ReadFileToStringTest, ReadsProcFilesThatReportNoSize) {
  // procfs and cgroupfs files stat as 0 bytes: read to the end all the same.
  struct stat st {};
  ASSERT_EQ(::stat("/proc/self/status", &st), 0);
  ASSERT_EQ(st.st_size, 0);
  auto status = ReadFileToString("/proc/self/status");
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->rfind("Name:", 0), 0u) << *status;
  EXPECT_NE(status->find("\nVmRSS:"), std::string::npos);
  EXPECT_EQ(ReadFileToString("/proc/self/status", 16).status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace kubicle
