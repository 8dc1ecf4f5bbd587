#include "noderuntime/node_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "guest/client/fake_agent_test_util.h"

namespace kubicle::noderuntime {
namespace {

TEST(NodeUtilTest, Ids) {
  EXPECT_TRUE(ValidateId("sb-1", "id").ok());
  EXPECT_TRUE(ValidateId(std::string(63, 'a'), "id").ok());
  for (const char* bad : {"", "-a", "a-", "A", "a_b", "a.b", "a/b"}) {
    Status s = ValidateId(bad, "sandbox id");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("sandbox id"), std::string::npos);
  }
  EXPECT_FALSE(ValidateId(std::string(64, 'a'), "id").ok());
}

TEST(NodeUtilTest, Labels) {
  EXPECT_TRUE(ValidateLabels({{"kubicle.dev/run", "r1"}, {"tier", ""}, {"a_b.c", "X-1"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"", "x"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"bad key", "x"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"UPPER.dev/x", "x"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"k", "-x"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"k", std::string(64, 'v')}}).ok());
  EXPECT_FALSE(ValidateLabels({{"/x", "v"}}).ok());
}

TEST(NodeUtilTest, ExecEnvOverridesTheSandboxEnv) {
  EXPECT_EQ(MergedEnv({}, {"A=1"}), (std::vector<std::string>{"A=1"}));
  EXPECT_EQ(MergedEnv({{"A", "s"}, {"B", "s"}}, {"B=e", "C=e"}),
            (std::vector<std::string>{"A=s", "B=e", "C=e"}));
  // An entry without '=' is kept for the agent to refuse, not dropped.
  EXPECT_EQ(MergedEnv({{"A", "s"}}, {"BAD"}), (std::vector<std::string>{"A=s", "BAD"}));
}

TEST(NodeUtilTest, AnExecThatRunsOutOfTimeIsAnsweredByTheGuest) {
  using guest::protocol::Frame;
  using guest::protocol::MsgType;
  using namespace std::chrono_literals;
  auto [a, b] = guest::client::test_util::SocketPair();
  // A guest that enforces timeout_ms as kubicle-agent does: it kills the
  // command when the time is up, counted from when the request arrived,
  // and answers with the output so far and timed_out.
  using guest::client::test_util::FakeAgent;
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame& f) {
    if (f.type != MsgType::kExecStart) return;
    const auto req = *guest::protocol::ExecStartRequest::Decode(f.payload);
    ag.Reply(guest::protocol::ExecStartReply{42}, f.id, guest::protocol::kFlagMore);
    ag.Spawn([&ag, id = f.id, ms = req.timeout_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      ag.TrySend(ag.Encode(guest::protocol::ExecOutputChunk{guest::protocol::OutputStream::kStdout,
                                                            {'s', 'o', 'f', 'a', 'r'}},
                           id, guest::protocol::kFlagMore));
      guest::protocol::ExecExitReply exit;
      exit.signal = 9;
      exit.timed_out = true;
      ag.TrySend(ag.Encode(exit, id));
    });
  });
  auto c = guest::client::AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  guest::protocol::ExecStartRequest req;
  req.argv = {"sleep", "1000"};
  const auto deadline = BoundExec(&req, 300ms);
  EXPECT_EQ(req.timeout_ms, 300u) << "the guest is told the caller's timeout";
  auto r = (*c)->Exec(req, {}, deadline);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << ": the node gave up before the guest answered";
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, 9u);
  EXPECT_EQ(std::string(r->stdout_data.begin(), r->stdout_data.end()), "sofar");

  // A request that asks for less time keeps it.
  guest::protocol::ExecStartRequest sooner;
  sooner.timeout_ms = 100;
  (void)BoundExec(&sooner, 300ms);
  EXPECT_EQ(sooner.timeout_ms, 100u);
}

TEST(NodeUtilTest, TokensAndDigests) {
  std::string a = RandomHex(32), b = RandomHex(32);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
}

TEST(NodeUtilTest, AtomicWriteAndDigestOfFiles) {
  char tmpl[] = "/tmp/kubicle-nodeutil-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  ASSERT_TRUE(AtomicWriteFile(dir + "/a", "ab").ok());
  ASSERT_TRUE(AtomicWriteFile(dir + "/b", "c").ok());
  ASSERT_TRUE(AtomicWriteFile(dir + "/a", "a").ok());  // replaces
  ASSERT_TRUE(AtomicWriteFile(dir + "/a", "ab").ok());
  EXPECT_EQ(*ReadFileToString(dir + "/a"), "ab");
  // Only the two files: no temporaries left behind.
  size_t n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) (void)e, ++n;
  EXPECT_EQ(n, 2u);
  auto d = Sha256Files({dir + "/a", dir + "/b"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "sha256:" + Sha256Hex("abc"));
  EXPECT_EQ(Sha256Files({dir + "/missing"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(TailOfFile(dir + "/a", 1), "b");
  EXPECT_FALSE(AtomicWriteFile(dir + "/nodir/x", "x").ok());
  ASSERT_TRUE(RemoveTree(dir).ok());
}

TEST(NodeUtilTest, PrivateDirAndExactModesIgnoreTheUmask) {
  char tmpl[] = "/tmp/kn-modes-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const mode_t old = ::umask(0);
  ASSERT_TRUE(MakePrivateDir(dir + "/a/sock", 0700).ok());
  int fd = ::open((dir + "/a/sock/f").c_str(), O_CREAT | O_WRONLY, 0666);
  ::close(fd);
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/a/sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_TRUE(SetExactMode(dir + "/a/sock/f", 0600).ok());
  ASSERT_EQ(::stat((dir + "/a/sock/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::symlink("f", (dir + "/a/sock/l").c_str()), 0);
  EXPECT_EQ(SetExactMode(dir + "/a/sock/l", 0600).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(SetExactMode(dir + "/nope", 0600).ok());
  // An existing directory with a looser mode is tightened.
  ASSERT_EQ(::chmod((dir + "/a/sock").c_str(), 0777), 0);
  ASSERT_TRUE(MakePrivateDir(dir + "/a/sock").ok());
  ASSERT_EQ(::stat((dir + "/a/sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  (void)RemoveTree(dir);
}

}  // namespace
}  // namespace kubicle::noderuntime
