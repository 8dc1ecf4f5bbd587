// Kills a process in the middle of writing to a copy-on-write disk (SIGKILL
// at arbitrary points, over and over) and checks what it leaves: the base
// and the frozen layer are byte-for-byte unchanged, the overlay reopens,
// every flushed write is there, nothing outside what was written changed
// (copy-up preserved the rest of each cluster) and every written page holds
// one complete write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <map>

#include "snapshot/layered_disk.h"
#include "snapshot/testing/disk_fixture.h"
#include "snapshot/testing/temp_dir.h"

namespace kubicle::snapshot {
namespace {

using namespace testing;  // NOLINT
constexpr uint64_t kCluster = 64 << 10;
constexpr uint64_t kClusters = 48;
constexpr uint64_t kDiskSize = kClusters * kCluster;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kWriteAt = 16 << 10;  // each write: 2 pages in the middle of a cluster
constexpr uint64_t kWriteLen = 2 * kPage;
constexpr int kFlushEvery = 8;

uint64_t ClusterOf(uint64_t seq) { return (seq * 7919 + seq / 3) % kClusters; }

// Page j of write seq: a header naming the write, then its fill byte.
std::vector<uint8_t> Pattern(uint64_t seq) {
  std::vector<uint8_t> p(kWriteLen, static_cast<uint8_t>(seq * 31 + 1));
  for (uint64_t j = 0; j < kWriteLen / kPage; ++j) {
    uint64_t hdr[2] = {seq, ClusterOf(seq)};
    std::memcpy(p.data() + j * kPage, hdr, sizeof(hdr));
  }
  return p;
}

// The writer: loops forever, flushing every kFlushEvery writes and then
// reporting the last flushed sequence number on fd.
[[noreturn]] void Writer(const DiskChain& chain, const std::string& overlay, uint64_t first_seq,
                         int fd) {
  auto disk = LayeredDisk::OpenExisting(chain, overlay);
  if (!disk.ok()) ::_exit(2);
  for (uint64_t seq = first_seq;; ++seq) {
    if (!Write(**disk, ClusterOf(seq) * kCluster + kWriteAt, Pattern(seq)).ok()) ::_exit(3);
    if (seq % kFlushEvery == kFlushEvery - 1) {
      if (!(*disk)->Flush().ok()) ::_exit(4);
      if (::write(fd, &seq, sizeof(seq)) != sizeof(seq)) ::_exit(5);
    }
  }
}

class LayeredDiskCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = MakeBase(dir_ / "base", kDiskSize);
    auto d = LayeredDisk::Create({dir_ / "base", kDiskSize, {}}, dir_ / "frozen");
    ASSERT_TRUE(d.ok());
    lower_ = base_;
    std::mt19937_64 rng(11);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(RandomWrite(**d, lower_, rng).ok());
    auto c = (*d)->Freeze(dir_ / "overlay");
    ASSERT_TRUE(c.ok());
    chain_ = *c;
    base_crc_ = FileCrc(dir_ / "base");
    frozen_crc_ = FileCrc(dir_ / "frozen");
  }

  // Checks every cluster after a kill, given the last flushed sequence.
  void Verify(uint64_t first_seq, int64_t flushed) {
    auto d = LayeredDisk::OpenExisting(chain_, dir_ / "overlay");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    std::map<uint64_t, uint64_t> last_flushed;  // cluster -> last seq <= flushed
    for (int64_t s = static_cast<int64_t>(first_seq); s <= flushed; ++s) {
      last_flushed[ClusterOf(static_cast<uint64_t>(s))] = static_cast<uint64_t>(s);
    }
    std::vector<uint8_t> disk = ReadAll(**d);
    ASSERT_EQ(disk.size(), kDiskSize);
    for (uint64_t c = 0; c < kClusters; ++c) {
      uint64_t start = c * kCluster;
      for (uint64_t off = 0; off < kCluster; off += kPage) {
        const uint8_t* got = disk.data() + start + off;
        const uint8_t* lower = lower_.data() + start + off;
        bool written_area = off >= kWriteAt && off < kWriteAt + kWriteLen;
        if (!written_area) {
          ASSERT_EQ(std::memcmp(got, lower, kPage), 0) << "cluster " << c << " +" << off;
          continue;
        }
        uint64_t hdr[2];
        std::memcpy(hdr, got, sizeof(hdr));
        bool is_lower = std::memcmp(got, lower, kPage) == 0;
        bool is_write = hdr[1] == c && ClusterOf(hdr[0]) == c &&
                        std::memcmp(got, Pattern(hdr[0]).data() + (off - kWriteAt), kPage) == 0;
        auto it = last_flushed.find(c);
        if (it != last_flushed.end()) {
          ASSERT_TRUE(is_write && hdr[0] >= it->second)
              << "cluster " << c << " lost flushed write " << it->second;
        } else {
          ASSERT_TRUE(is_lower || is_write) << "cluster " << c << " holds garbage";
        }
      }
    }
  }

  TempDir dir_;
  std::vector<uint8_t> base_, lower_;
  DiskChain chain_;
  uint32_t base_crc_ = 0, frozen_crc_ = 0;
};

TEST_F(LayeredDiskCrashTest, KillMidWriteNeverCorruptsSharedLayersOrFlushedData) {
  for (int round = 0; round < 8; ++round) {
    // Sequence numbers are unique across rounds, so an older round's page
    // can never pass for a write this round flushed.
    uint64_t first_seq = static_cast<uint64_t>(round) * 1'000'000'000;
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      Writer(chain_, dir_ / "overlay", first_seq, fds[1]);
    }
    ::close(fds[1]);
    ::usleep(static_cast<useconds_t>(20'000 + round * 17'000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited with " << WEXITSTATUS(status);
    int64_t flushed = -1;
    uint64_t seq;
    while (::read(fds[0], &seq, sizeof(seq)) == sizeof(seq)) flushed = static_cast<int64_t>(seq);
    ::close(fds[0]);
    ASSERT_EQ(FileCrc(dir_ / "base"), base_crc_) << "round " << round;
    ASSERT_EQ(FileCrc(dir_ / "frozen"), frozen_crc_) << "round " << round;
    Verify(first_seq, flushed);
    if (HasFatalFailure()) return;
    RecordProperty("flushed_round_" + std::to_string(round),
                   std::to_string(flushed < 0 ? 0 : flushed - static_cast<int64_t>(first_seq) + 1));
    // The next round's writer continues on the same overlay: a crash after a
    // crash must be just as safe.
  }
}

}  // namespace
}  // namespace kubicle::snapshot
