// WorkspaceStore: images made by mke2fs, records re-loaded by a new store
// on the same directory (and a Put cut short removed), idempotent puts,
// the budget, tokens, one writer (attach, release, file calls and delete
// refused while attached), and files through the real kubicle-ext4.
#include "noderuntime/state/workspace_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "noderuntime/node_util.h"

namespace kubicle::noderuntime {
namespace {

namespace fs = std::filesystem;

class WorkspaceStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/workspace_store_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::unique_ptr<WorkspaceStore> Open(uint64_t budget = 0) {
    WorkspaceStoreOptions o;
    o.dir = root_ + "/workspaces";
    o.budget_mib = budget;
    o.helper.helper = KUBICLE_EXT4_HELPER;
    o.attach_wait = std::chrono::milliseconds(200);
    auto s = WorkspaceStore::Open(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static guest::protocol::ByteSpan Span(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }
  static std::string Read(WorkspaceStore& s, const std::string& name, const std::string& path,
                          Status* st = nullptr) {
    std::string out;
    Status r = s.ReadFile(name, path, [&](const guest::client::FileChunk& c) {
      out.append(reinterpret_cast<const char*>(c.data.data()), c.data.size());
      return Status::Ok();
    });
    if (st) *st = r;
    return out;
  }
  std::string root_;
};

TEST_F(WorkspaceStoreTest, PutMakesASparseExt4ImageAndARecord) {
  auto s = Open();
  auto w = s->Put({.name = "ws-1", .size_mib = 64, .labels = {{"team", "a"}}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->token.size(), 64u) << "minted and returned once";
  EXPECT_EQ(w->state, WorkspaceState::kReady);
  const std::string image = root_ + "/workspaces/ws-1/disk.img";
  struct stat st {};
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 64 << 20);
  EXPECT_LT(st.st_blocks * 512, 32 << 20) << "sparse";
  EXPECT_EQ(std::system(("e2fsck -fn " + image + " >/dev/null 2>&1").c_str()), 0);
  EXPECT_TRUE(fs::exists(root_ + "/workspaces/ws-1/record.json"));
  EXPECT_TRUE(s->CheckToken("ws-1", w->token));
  EXPECT_FALSE(s->CheckToken("ws-1", "nope"));
  EXPECT_FALSE(s->CheckToken("ws-2", w->token));
  // Idempotent: the same size answers the same workspace, without a token.
  auto again = s->Put({.name = "ws-1", .size_mib = 64});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->token.empty());
  EXPECT_EQ(again->labels.at("team"), "a");
  EXPECT_EQ(s->Put({.name = "ws-1", .size_mib = 128}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Put({.name = "Bad_Name", .size_mib = 64}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Put({.name = "ws-2", .size_mib = 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Put({.name = "ws-2", .size_mib = 64, .token_sha256 = "xyz"}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(WorkspaceStoreTest, ACallerGivenTokenHashIsKeptAndNoTokenMinted) {
  auto s = Open();
  auto w = s->Put({.name = "ws-1", .size_mib = 16, .token_sha256 = Sha256Hex("secret")});
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->token.empty());
  EXPECT_TRUE(s->CheckToken("ws-1", "secret"));
}

TEST_F(WorkspaceStoreTest, BudgetAndDeleteFreeIt) {
  auto s = Open(/*budget=*/100);
  ASSERT_TRUE(s->Put({.name = "a", .size_mib = 64}).ok());
  auto over = s->Put({.name = "b", .size_mib = 64});
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("64 of 100"), std::string::npos) << over.status().ToString();
  EXPECT_FALSE(fs::exists(root_ + "/workspaces/b"));
  ASSERT_TRUE(s->Delete("a").ok());
  EXPECT_FALSE(fs::exists(root_ + "/workspaces/a"));
  EXPECT_EQ(s->Delete("a").code(), StatusCode::kNotFound);
  EXPECT_TRUE(s->Put({.name = "b", .size_mib = 64}).ok());
  EXPECT_EQ(s->total_mib(), 64u);
}

TEST_F(WorkspaceStoreTest, ReopenedStoreHasTheWorkspacesAndDropsAnUnfinishedPut) {
  std::string token;
  {
    auto s = Open();
    auto w = s->Put({.name = "ws-1", .size_mib = 16});
    ASSERT_TRUE(w.ok());
    token = w->token;
    ASSERT_TRUE(s->WriteFile("ws-1", "/keep.txt", Span("kept"), 0644).ok());
  }
  // A Put cut short: a directory with an image but no record.
  fs::create_directories(root_ + "/workspaces/half");
  std::ofstream(root_ + "/workspaces/half/disk.img.tmp") << "x";
  // A record nobody can read: kept, Failed, named.
  fs::create_directories(root_ + "/workspaces/torn");
  std::ofstream(root_ + "/workspaces/torn/record.json") << "{\"version\":1,";
  auto s = Open();
  EXPECT_FALSE(fs::exists(root_ + "/workspaces/half"));
  auto w = s->Get("ws-1");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->size_mib, 16u);
  EXPECT_TRUE(s->CheckToken("ws-1", token));
  EXPECT_EQ(Read(*s, "ws-1", "/keep.txt"), "kept");
  auto torn = s->Get("torn");
  ASSERT_TRUE(torn.ok());
  EXPECT_EQ(torn->state, WorkspaceState::kFailed);
  EXPECT_EQ(s->Attach("torn", "sb-1").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s->Delete("torn").ok());
}

TEST_F(WorkspaceStoreTest, OneWriterAtATime) {
  auto s = Open();
  ASSERT_TRUE(s->Put({.name = "ws-1", .size_mib = 16}).ok());
  ASSERT_TRUE(s->WriteFile("ws-1", "/a/b.txt", Span("host"), 0600).ok());
  auto image = s->Attach("ws-1", "sb-1");
  ASSERT_TRUE(image.ok());
  EXPECT_EQ(*image, root_ + "/workspaces/ws-1/disk.img");
  EXPECT_EQ(s->Get("ws-1")->attached_to, "sb-1");
  auto second = s->Attach("ws-1", "sb-2");
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("attached to sb-1"), std::string::npos);
  Status st;
  (void)Read(*s, "ws-1", "/a/b.txt", &st);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("sb-1"), std::string::npos);
  EXPECT_EQ(s->WriteFile("ws-1", "/x", Span("x"), 0644).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->StatFile("ws-1", "/a").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->ListFiles("ws-1", "/").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->RemoveFile("ws-1", "/a", true).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Delete("ws-1").code(), StatusCode::kFailedPrecondition);
  s->Release("ws-1", "sb-2");  // not the holder: nothing
  EXPECT_EQ(s->Holder("ws-1"), "sb-1");
  s->Release("ws-1", "sb-1");
  EXPECT_EQ(s->Holder("ws-1"), "");
  EXPECT_EQ(Read(*s, "ws-1", "/a/b.txt"), "host");
  auto st2 = s->StatFile("ws-1", "/a/b.txt");
  ASSERT_TRUE(st2.ok());
  EXPECT_EQ(st2->mode, 0600u);
  auto ls = s->ListFiles("ws-1", "/a");
  ASSERT_TRUE(ls.ok());
  ASSERT_EQ(ls->size(), 1u);
  EXPECT_EQ((*ls)[0].name, "b.txt");
  EXPECT_TRUE(s->RemoveFile("ws-1", "/a", true).ok());
  EXPECT_EQ(s->StatFile("ws-1", "/a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->Attach("nope", "sb-1").status().code(), StatusCode::kNotFound);
}

// A VM killed before its checkpoint leaves the file's newest data only in
// the journal: the next host file call replays it (confined e2fsck) first
// and reads what the guest wrote, not the stale block.
TEST_F(WorkspaceStoreTest, AFileCallReplaysAJournalTheGuestLeft) {
  auto s = Open();
  ASSERT_TRUE(s->Put({.name = "ws-1", .size_mib = 16}).ok());
  ASSERT_TRUE(s->WriteFile("ws-1", "/a.txt", Span("host"), 0644).ok());
  const std::string image = s->ImagePath("ws-1");
  const std::string blocks = root_ + "/blocks";
  ASSERT_EQ(std::system(("debugfs -R 'blocks /a.txt' " + image + " > " + blocks + " 2>/dev/null").c_str()), 0);
  uint64_t block = 0;
  std::ifstream(blocks) >> block;
  ASSERT_GT(block, 0u);
  const std::string bs_out = root_ + "/bs";
  ASSERT_EQ(std::system(("dumpe2fs -h " + image + " 2>/dev/null | sed -n 's/^Block size: *//p' > " + bs_out).c_str()), 0);
  size_t block_size = 0;
  std::ifstream(bs_out) >> block_size;
  ASSERT_GT(block_size, 0u);
  std::string data = "HOST";
  data.resize(block_size, '\0');
  std::ofstream(root_ + "/data", std::ios::binary) << data;
  std::ofstream(root_ + "/cmds") << "jo\njw -b " << block << " " << root_ << "/data\njc\n";
  ASSERT_EQ(std::system(("debugfs -w -f " + root_ + "/cmds " + image + " >/dev/null 2>&1").c_str()), 0);
  ASSERT_TRUE(*ext4::NeedsJournalReplay(image));
  Status st;
  EXPECT_EQ(Read(*s, "ws-1", "/a.txt", &st), "HOST") << st.ToString();
  EXPECT_FALSE(*ext4::NeedsJournalReplay(image));
}

}  // namespace
}  // namespace kubicle::noderuntime
