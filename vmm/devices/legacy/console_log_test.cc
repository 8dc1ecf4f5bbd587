#include "vmm/devices/legacy/console_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kubicle::vmm::devices::legacy {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class ConsoleLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-console-log-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/serial.log";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ConsoleLog> Open(ConsoleLogLimits limits) {
    auto log = ConsoleLog::Open(path_, limits, [this] { return now_; });
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return log.ok() ? std::move(log).value() : nullptr;
  }
  // As the serial device does: a byte at a time.
  static void Bytewise(ConsoleLog& log, const std::string& s) {
    for (char c : s) log.Write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&c), 1));
  }
  static std::string Read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static std::string Text(size_t n, size_t from = 0) {
    std::string s;
    for (size_t i = from; i < from + n; ++i) s.push_back(char('a' + i % 26));
    return s;
  }
  static ConsoleLogLimits NoRate(uint64_t max, uint32_t files) {
    return ConsoleLogLimits{max, files, 0, 0};
  }

  std::string dir_, path_;
  ConsoleLog::Clock::time_point now_{};
};

TEST_F(ConsoleLogTest, RotatesAtTheCapKeepingTheNewestFiles) {
  auto log = Open(NoRate(100, 2));
  ASSERT_TRUE(log);
  const std::string all = Text(350);
  Bytewise(*log, all);
  EXPECT_EQ(Read(path_), all.substr(300));
  EXPECT_EQ(Read(path_ + ".1"), all.substr(200, 100));
  EXPECT_EQ(Read(path_ + ".2"), all.substr(100, 100));
  EXPECT_FALSE(fs::exists(path_ + ".3"));
  EXPECT_EQ(log->rotations(), 3u);
  EXPECT_EQ(log->dropped_bytes(), 0u);
}

TEST_F(ConsoleLogTest, WholeWritesSplitAtTheCap) {
  auto log = Open(NoRate(100, 1));
  ASSERT_TRUE(log);
  const std::string all = Text(250);
  log->Write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(all.data()), all.size()));
  EXPECT_EQ(Read(path_), all.substr(200));
  EXPECT_EQ(Read(path_ + ".1"), all.substr(100, 100));
}

TEST_F(ConsoleLogTest, AnExistingFileCountsTowardTheCap) {
  { std::ofstream(path_) << Text(90); }
  auto log = Open(NoRate(100, 1));
  ASSERT_TRUE(log);
  Bytewise(*log, Text(20, 90));
  EXPECT_EQ(Read(path_ + ".1"), Text(100));
  EXPECT_EQ(Read(path_), Text(10, 100));
}

TEST_F(ConsoleLogTest, WithoutRotationOutputStopsAtTheCapAfterAMarker) {
  auto log = Open(NoRate(100, 0));
  ASSERT_TRUE(log);
  Bytewise(*log, Text(300));
  const std::string got = Read(path_);
  ASSERT_GT(got.size(), 100u);
  EXPECT_EQ(got.substr(0, 100), Text(100));
  EXPECT_EQ(got.substr(100), "\n[kubicle-vmm: serial log reached 100 bytes; later console output dropped]\n");
  EXPECT_EQ(log->dropped_bytes(), 200u);
  EXPECT_FALSE(fs::exists(path_ + ".1"));
}

TEST_F(ConsoleLogTest, AFloodIsRateLimitedWithMarkersAndResumes) {
  auto log = Open({1u << 20, 1, 1000, 2000});  // 1000 B/s, bursts of 2000
  ASSERT_TRUE(log);
  Bytewise(*log, Text(5000));  // all at once: the burst goes out, the rest is dropped
  const std::string dropping = "\n[kubicle-vmm: console output over 1000 bytes/s; dropping it]\n";
  EXPECT_EQ(Read(path_), Text(2000) + dropping);
  EXPECT_EQ(log->dropped_bytes(), 3000u);
  now_ += 500ms;  // 500 tokens: below half the burst, still dropping
  Bytewise(*log, Text(100));
  now_ += 400ms;  // 900 + 1000/2... still under a second since dropping began
  Bytewise(*log, Text(100));
  EXPECT_EQ(log->dropped_bytes(), 3200u);
  now_ += 600ms;  // 1.5 s: 1500 tokens
  Bytewise(*log, "ok\n");
  EXPECT_EQ(Read(path_), Text(2000) + dropping +
                             "[kubicle-vmm: 3200 bytes of console output dropped]\nok\n");
}

TEST_F(ConsoleLogTest, AMarkerIsNeverSplitAcrossFiles) {
  auto log = Open({60, 1, 10, 50});
  ASSERT_TRUE(log);
  Bytewise(*log, Text(80));
  EXPECT_EQ(Read(path_ + ".1"), Text(50));
  EXPECT_EQ(Read(path_), "\n[kubicle-vmm: console output over 10 bytes/s; dropping it]\n");
}

TEST_F(ConsoleLogTest, DiskUseIsBoundedWhateverTheGuestWrites) {
  auto log = Open(NoRate(4096, 1));
  ASSERT_TRUE(log);
  const std::string chunk = Text(4000);
  for (int i = 0; i < 1000; ++i) {  // 4 MB
    log->Write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size()));
  }
  EXPECT_LE(fs::file_size(path_), 4096u);
  EXPECT_EQ(fs::file_size(path_ + ".1"), 4096u);
  EXPECT_FALSE(fs::exists(path_ + ".2"));
}

TEST_F(ConsoleLogTest, AnFdLogIsRateLimitedButNotCapped) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
  UniqueFd read_end(fds[0]);
  auto log = ConsoleLog::ForFd(UniqueFd(fds[1]), {10, 1, 1000, 20}, [this] { return now_; });
  Bytewise(*log, Text(30));
  char buf[256];
  const ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
  ASSERT_GT(n, 20);
  EXPECT_EQ(std::string(buf, 20), Text(20));  // past the 10-byte "cap": no cap on an fd
  EXPECT_EQ(log->dropped_bytes(), 10u);
}

}  // namespace
}  // namespace kubicle::vmm::devices::legacy
