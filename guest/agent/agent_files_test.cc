// kubicle-agent file operations, run as a host process, driven by AgentClient.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "guest/agent/agent_test_env.h"
#include "guest/protocol/tlv.h"

namespace kubicle::guest::agent::testing {
namespace {

using namespace std::chrono_literals;
using client::DeadlineIn;
using protocol::ByteSpan;
using protocol::FileType;
using protocol::MsgType;

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename());
  return out;
}

TEST_F(AgentTest, LargeBinaryFileRoundTrip) {
  const protocol::Bytes data = RandomBytes((5 << 20) + 123, 3);
  const std::string path = Path("blob.bin");
  ASSERT_TRUE(client_->WriteFile(path, data, {0640, true}, DeadlineIn(30s)).ok());
  EXPECT_EQ(ReadLocalFile(path), std::string(data.begin(), data.end()));
  auto back = client_->ReadFile(path, DeadlineIn(30s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  auto st = client_->Stat(path);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, FileType::kFile);
  EXPECT_EQ(st->size, data.size());
  EXPECT_EQ(st->mode, 0640u);
  // The atomic write left no temporary file behind.
  EXPECT_EQ(Names(agent_->dir()), (std::set<std::string>{"agent.sock", "blob.bin"}));
}

TEST_F(AgentTest, WriteAppliesTheExactModeAndReplacesContent) {
  const std::string path = Path("f");
  const std::string a = "first version, longer", b = "second";
  ASSERT_TRUE(client_->WriteFile(path, protocol::Bytes(a.begin(), a.end()), {0600, false}).ok());
  ASSERT_TRUE(client_->WriteFile(path, protocol::Bytes(b.begin(), b.end()), {0755, true}).ok());
  EXPECT_EQ(ReadLocalFile(path), b);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_TRUE(client_->WriteFile(path, {}, {0644, false}).ok());  // empty file
  EXPECT_EQ(ReadLocalFile(path), "");
  auto empty = client_->ReadFile(path);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_F(AgentTest, WriteErrors) {
  const protocol::Bytes d = {1, 2, 3};
  EXPECT_EQ(client_->WriteFile(Path("missing/dir/f"), d).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->WriteFile(Path("missing/dir/f"), d, {0644, false}).code(),
            StatusCode::kNotFound);
  ASSERT_EQ(::mkdir(Path("adir").c_str(), 0755), 0);
  EXPECT_EQ(client_->WriteFile(Path("adir"), d).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->WriteFile(Path("adir"), d, {0644, false}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(Names(Path("adir")).size(), 0u);
  EXPECT_EQ(Names(agent_->dir()), (std::set<std::string>{"agent.sock", "adir"}));
}

TEST_F(AgentTest, FailedWriteStreamIsAnsweredOnceAndCleanedUp) {
  // Three chunks of one stream; the second has the wrong offset.
  auto chunk = [](std::optional<std::string> path, uint64_t offset, size_t n, bool more) {
    protocol::FileWriteChunk c;
    c.path = std::move(path);
    c.atomic = true;
    c.offset = offset;
    c.data.assign(n, 0xab);
    return *protocol::EncodeFrame(protocol::MakeFrame(c, 77, more ? protocol::kFlagMore : 0));
  };
  protocol::Bytes raw = chunk(Path("partial"), 0, 10, true);
  for (const auto& f : {chunk(std::nullopt, 5, 10, true), chunk(std::nullopt, 20, 10, false)}) {
    raw.insert(raw.end(), f.begin(), f.end());
  }
  auto reply = client_->RawExchange(77, raw);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->type, MsgType::kError);
  auto err = protocol::ErrorReply::Decode(reply->payload);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->code, protocol::ErrorCode::kInvalidArgument);
  EXPECT_TRUE(client_->Ping().ok());
  EXPECT_EQ(Names(agent_->dir()), (std::set<std::string>{"agent.sock"}));
  // A chunk that does not start a stream and has no open stream is refused.
  auto orphan = client_->RawExchange(78, [&] {
    protocol::FileWriteChunk c;
    c.offset = 0;
    return *protocol::EncodeFrame(protocol::MakeFrame(c, 78));
  }());
  ASSERT_TRUE(orphan.ok());
  EXPECT_EQ(orphan->type, MsgType::kError);
}

TEST_F(AgentTest, ReadRangesArriveInBoundedChunks) {
  const protocol::Bytes data = RandomBytes(1 << 20, 9);
  WriteLocalFile(Path("r"), std::string(data.begin(), data.end()));
  std::vector<size_t> sizes;
  protocol::Bytes got;
  Status s = client_->ReadFileChunks(Path("r"), 1000, 300000, [&](uint64_t off, ByteSpan d) {
    EXPECT_EQ(off, 1000 + got.size());
    sizes.push_back(d.size());
    got.insert(got.end(), d.begin(), d.end());
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, protocol::Bytes(data.begin() + 1000, data.begin() + 301000));
  EXPECT_GT(sizes.size(), 4u);
  for (size_t n : sizes) EXPECT_LE(n, protocol::kMaxChunk);
  // Past the end: nothing, not an error.
  got.clear();
  s = client_->ReadFileChunks(Path("r"), 5 << 20, 0, [&](uint64_t, ByteSpan d) {
    got.insert(got.end(), d.begin(), d.end());
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(got.empty());
}

TEST_F(AgentTest, ReadRefusesWhatIsNotARegularFile) {
  EXPECT_EQ(client_->ReadFile(Path("nope")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->ReadFile(agent_->dir()).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0644), 0);
  // A FIFO with no writer would block a naive reader forever.
  EXPECT_EQ(client_->ReadFile(Path("fifo"), DeadlineIn(5s)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client_->Ping().ok());
}

TEST_F(AgentTest, ReadsProcFilesThatReportSizeZero) {
  auto r = client_->ReadFile("/proc/self/status");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(ToString(*r).find("Name:"), std::string::npos);
}

TEST_F(AgentTest, StatDistinguishesTypes) {
  ASSERT_EQ(::symlink("/etc", Path("link").c_str()), 0);
  auto link = client_->Stat(Path("link"));
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(link->type, FileType::kSymlink);
  auto dir = client_->Stat(agent_->dir());
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->type, FileType::kDirectory);
  EXPECT_EQ(dir->uid, ::geteuid());
  auto sock = client_->Stat(agent_->socket_path());
  ASSERT_TRUE(sock.ok());
  EXPECT_EQ(sock->type, FileType::kOther);
  EXPECT_EQ(client_->Stat(Path("none")).status().code(), StatusCode::kNotFound);
}

TEST_F(AgentTest, ListStreamsLargeDirectories) {
  const std::string dir = Path("many");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  std::set<std::string> expected;
  for (int i = 0; i < 3000; ++i) {
    const std::string name = "file-with-a-fairly-long-name-number-" + std::to_string(i);
    WriteLocalFile(dir + "/" + name, std::to_string(i));
    expected.insert(name);
  }
  ASSERT_EQ(::mkdir((dir + "/sub").c_str(), 0700), 0);
  expected.insert("sub");
  auto entries = client_->List(dir, DeadlineIn(30s));
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  std::set<std::string> got;
  for (const auto& e : *entries) {
    got.insert(e.name);
    if (e.name == "sub") {
      EXPECT_EQ(e.type, FileType::kDirectory);
      EXPECT_EQ(e.mode, 0700u);
    } else if (e.name.find("-7") != std::string::npos && e.name.size() == 37) {
      EXPECT_EQ(e.size, 1u);
    }
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(client_->List(Path("none")).status().code(), StatusCode::kNotFound);
  WriteLocalFile(Path("plain"), "x");
  EXPECT_EQ(client_->List(Path("plain")).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(AgentTest, MkdirLikeMkdirP) {
  EXPECT_EQ(client_->Mkdir(Path("a/b/c"), 0700, false).code(), StatusCode::kNotFound);
  ASSERT_TRUE(client_->Mkdir(Path("a/b/c"), 0700, true).ok());
  struct stat st;
  ASSERT_EQ(::stat(Path("a/b/c").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_TRUE(client_->Mkdir(Path("a/b/c"), 0700, true).ok());
  EXPECT_TRUE(client_->Mkdir(Path("a/b/c/"), 0700, true).ok());
  EXPECT_EQ(client_->Mkdir(Path("a/b"), 0755, false).code(), StatusCode::kAlreadyExists);
  WriteLocalFile(Path("file"), "x");
  EXPECT_EQ(client_->Mkdir(Path("file/sub"), 0755, true).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->Mkdir(Path("file"), 0755, true).code(), StatusCode::kFailedPrecondition);
}

TEST_F(AgentTest, RemoveRecursiveNeverFollowsSymlinks) {
  const std::string outside = Path("outside");
  ASSERT_EQ(::mkdir(outside.c_str(), 0755), 0);
  WriteLocalFile(outside + "/keep", "precious");
  ASSERT_TRUE(client_->Mkdir(Path("tree/x/y/z"), 0755, true).ok());
  WriteLocalFile(Path("tree/x/y/z/f"), "1");
  WriteLocalFile(Path("tree/top"), "2");
  ASSERT_EQ(::symlink(outside.c_str(), Path("tree/x/link").c_str()), 0);
  EXPECT_EQ(client_->Remove(Path("tree"), false).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(client_->Remove(Path("tree"), true).ok());
  EXPECT_FALSE(std::filesystem::exists(Path("tree")));
  EXPECT_EQ(ReadLocalFile(outside + "/keep"), "precious");
  EXPECT_TRUE(client_->Remove(outside + "/keep").ok());
  EXPECT_TRUE(client_->Remove(outside).ok());
  EXPECT_EQ(client_->Remove(outside).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Remove("/", true).code(), StatusCode::kInvalidArgument);
}

TEST_F(AgentTest, Chmod) {
  WriteLocalFile(Path("m"), "x");
  ASSERT_TRUE(client_->Chmod(Path("m"), 04711).ok());
  struct stat st;
  ASSERT_EQ(::stat(Path("m").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04711u);
  EXPECT_EQ(client_->Chmod(Path("none"), 0644).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Chmod(Path("m"), 010000).code(), StatusCode::kInvalidArgument);
}

TEST_F(AgentTest, ConcurrentTransfersOnOneConnection) {
  std::vector<protocol::Bytes> blobs;
  for (uint32_t i = 0; i < 4; ++i) blobs.push_back(RandomBytes(700 * 1024 + i, 100 + i));
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (size_t i = 0; i < blobs.size(); ++i) {
    threads.emplace_back([&, i] {
      const std::string p = Path("c" + std::to_string(i));
      if (!client_->WriteFile(p, blobs[i], {}, DeadlineIn(30s)).ok()) return;
      auto back = client_->ReadFile(p, DeadlineIn(30s));
      if (back.ok() && *back == blobs[i]) ++good;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 4);
}

}  // namespace
}  // namespace kubicle::guest::agent::testing
