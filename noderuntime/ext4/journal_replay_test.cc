// Journal replay over real images: debugfs writes a block through the
// journal only (jo/jw/jc, as a VM killed before its checkpoint leaves it),
// e2fsck -E journal_only replays it confined, and the block is then in
// place; a missing e2fsck, one past its deadline and one that fails are
// errors; the child has its own network namespace and only fds 0-3.
#include "noderuntime/ext4/journal_replay.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kubicle::noderuntime::ext4 {
namespace {

namespace fs = std::filesystem;

class JournalReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/journal_replay_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    image_ = dir_ + "/disk.img";
    ASSERT_EQ(std::system(("truncate -s 16M " + image_ + " && mke2fs -q -F -t ext4 -b 1024 " + image_ +
                           " >/dev/null 2>&1").c_str()), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Block `block` (1 KiB) written through the journal only.
  void JournalBlock(uint64_t block, const std::string& text) {
    const std::string data = dir_ + "/block", cmds = dir_ + "/cmds";
    std::string padded = text;
    padded.resize(1024, '\0');
    std::ofstream(data, std::ios::binary) << padded;
    std::ofstream(cmds) << "jo\njw -b " << block << " " << data << "\njc\n";
    ASSERT_EQ(std::system(("debugfs -w -f " + cmds + " " + image_ + " >/dev/null 2>&1").c_str()), 0);
  }
  std::string Block(uint64_t block, size_t n) {
    std::ifstream f(image_, std::ios::binary);
    f.seekg(static_cast<std::streamoff>(block * 1024));
    std::string out(n, '\0');
    f.read(out.data(), static_cast<std::streamsize>(n));
    return out;
  }
  std::string Script(const std::string& body) {
    const std::string path = dir_ + "/fake-e2fsck";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(path, fs::perms::owner_all);
    return path;
  }

  std::string dir_, image_;
};

TEST_F(JournalReplayTest, AJournalledBlockIsReplayedInPlace) {
  EXPECT_FALSE(*NeedsJournalReplay(image_));
  EXPECT_TRUE(ReplayJournal(image_, {}).ok()) << "nothing to replay";
  JournalBlock(3000, "written by a guest");
  ASSERT_TRUE(*NeedsJournalReplay(image_));
  EXPECT_EQ(Block(3000, 18), std::string(18, '\0')) << "only in the journal yet";
  Status st = ReplayJournal(image_, {});
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(*NeedsJournalReplay(image_));
  EXPECT_EQ(Block(3000, 18), "written by a guest");
}

TEST_F(JournalReplayTest, NotExt4IsDataLoss) {
  const std::string zero = dir_ + "/zero";
  ASSERT_EQ(std::system(("truncate -s 1M " + zero).c_str()), 0);
  EXPECT_EQ(NeedsJournalReplay(zero).status().code(), StatusCode::kDataLoss);
  const std::string tiny = dir_ + "/tiny";
  std::ofstream(tiny) << "x";
  EXPECT_EQ(NeedsJournalReplay(tiny).status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(NeedsJournalReplay(dir_ + "/none").ok());
}

TEST_F(JournalReplayTest, AFailingMissingOrSlowE2fsckIsAnError) {
  JournalBlock(3000, "x");
  JournalReplayOptions o;
  o.e2fsck = "no-such-e2fsck-anywhere";
  EXPECT_EQ(ReplayJournal(image_, o).code(), StatusCode::kFailedPrecondition);
  // What the child sees: fds 0-3 only, and (as root) a network namespace
  // with loopback alone.
  o.e2fsck = Script("ls /proc/self/fd | tr '\\n' ,; echo; grep -c : /proc/net/dev; exit 8");
  Status failed = ReplayJournal(image_, o);
  EXPECT_EQ(failed.code(), StatusCode::kDataLoss);
  EXPECT_NE(failed.message().find("exit 8"), std::string::npos) << failed.ToString();
  // ls lists its own directory fd too; nothing of the node's is there.
  EXPECT_NE(failed.message().find(": 0,1,2,3,"), std::string::npos) << failed.ToString();
  EXPECT_EQ(failed.message().find(",5,"), std::string::npos) << failed.ToString();
  if (::geteuid() == 0) {
    EXPECT_NE(failed.message().find(", 1"), std::string::npos) << failed.ToString();
  }
  o.e2fsck = Script("exit 0");  // claims success, replays nothing
  EXPECT_EQ(ReplayJournal(image_, o).code(), StatusCode::kDataLoss);
  o.e2fsck = Script("exec sleep 30");
  o.deadline = std::chrono::milliseconds(300);
  EXPECT_EQ(ReplayJournal(image_, o).code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(*NeedsJournalReplay(image_));
}

}  // namespace
}  // namespace kubicle::noderuntime::ext4
