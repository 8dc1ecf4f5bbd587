// The test guest's built-in exec driven by the real AgentClient::Exec: the
// same client code the node runtime uses against the Linux agent.
#include <gtest/gtest.h>

#include <string>

#include "guest/protocol/tlv.h"
#include "guest/testguest/agent_test_harness.h"

namespace kubicle::guest::testguest {
namespace {

using protocol::ExecStartRequest;

std::string Str(const Bytes& b) { return std::string(b.begin(), b.end()); }

client::ExecResult RunExec(AgentClient& c, ExecStartRequest req, const client::ExecIo& io = {}) {
  auto r = c.Exec(req, io);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : client::ExecResult{};
}

client::ExecResult RunExec(AgentClient& c, std::vector<std::string> argv) {
  ExecStartRequest req;
  req.argv = std::move(argv);
  return RunExec(c, req);
}

TEST(TestGuestExec, EchoTrueFalseAndNotFound) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  auto echo = RunExec(*c, {"echo", "hello", "world"});
  EXPECT_EQ(Str(echo.stdout_data), "hello world\n");
  EXPECT_TRUE(echo.stderr_data.empty());
  EXPECT_EQ(echo.exit_code, 0);
  EXPECT_NE(echo.pid, 0u);
  EXPECT_EQ(Str(RunExec(*c, {"/bin/echo", "-n", "x"}).stdout_data), "x");
  EXPECT_EQ(Str(RunExec(*c, {"echo"}).stdout_data), "\n");
  EXPECT_EQ(RunExec(*c, {"true"}).exit_code, 0);
  EXPECT_EQ(RunExec(*c, {"/usr/bin/false"}).exit_code, 1);
  auto missing = RunExec(*c, {"python3", "-c", "1"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_TRUE(missing.stdout_data.empty());
  EXPECT_NE(Str(missing.stderr_data).find("python3: not found"), std::string::npos)
      << Str(missing.stderr_data);
  EXPECT_NE(RunExec(*c, {"true"}).pid, RunExec(*c, {"true"}).pid);
  EXPECT_TRUE(c->Ping().ok());
}

TEST(TestGuestExec, ConsoleWritesLinesToTheSerialConsole) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  auto r = RunExec(*c, {"console", "200"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.stdout_data.empty());
  const std::string& out = h.platform_.console;
  ASSERT_EQ(out.size(), 200u);
  EXPECT_EQ(out.substr(0, 64), "kubicle-testguest: console flood ..............................\n");
  EXPECT_EQ(out.substr(64, 64), out.substr(0, 64));
  EXPECT_EQ(RunExec(*c, {"console", "12x"}).exit_code, 2);
  EXPECT_EQ(RunExec(*c, {"console"}).exit_code, 2);
  EXPECT_EQ(h.platform_.console.size(), 200u);
}

TEST(TestGuestExec, HostnameFollowsPostRestore) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Str(RunExec(*c, {"hostname"}).stdout_data), "kubicle-testguest\n");
  protocol::PostRestoreRequest pr;
  pr.hostname = "clone-7";
  pr.generation = 2;
  ASSERT_TRUE(c->PostRestore(pr).ok());
  EXPECT_EQ(Str(RunExec(*c, {"hostname"}).stdout_data), "clone-7\n");
}

TEST(TestGuestExec, PrintenvShowsTheExecsEnvironment) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  ExecStartRequest req;
  req.argv = {"printenv", "GREETING", "EMPTY"};
  req.env = {"GREETING=first", "EMPTY=", "GREETING=hello world"};
  auto named = RunExec(*c, req);
  EXPECT_EQ(Str(named.stdout_data), "hello world\n\n");
  EXPECT_EQ(named.exit_code, 0);
  req.argv = {"printenv", "UNSET"};
  EXPECT_EQ(RunExec(*c, req).exit_code, 1);
  req.argv = {"printenv"};
  req.env = {"A=1", "B=2"};
  EXPECT_EQ(Str(RunExec(*c, req).stdout_data), "A=1\nB=2\n");
  // A prefix of a name is not the name.
  req.argv = {"printenv", "GREET"};
  req.env = {"GREETING=x"};
  EXPECT_EQ(RunExec(*c, req).exit_code, 1);
}

TEST(TestGuestExec, CatReadsRamFilesAndInlineStdin) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->WriteFile("/etc/a", Pattern(64 * 1024, 5)).ok());
  ASSERT_TRUE(c->WriteFile("/b", Bytes{'b', '\n'}).ok());
  auto big = RunExec(*c, {"cat", "/etc/a"});
  EXPECT_EQ(big.stdout_data, Pattern(64 * 1024, 5));
  EXPECT_EQ(big.exit_code, 0);
  EXPECT_FALSE(big.truncated);
  auto two = RunExec(*c, {"cat", "/b", "/nope", "/etc", "/b"});
  EXPECT_EQ(Str(two.stdout_data), "b\nb\n");
  EXPECT_EQ(Str(two.stderr_data),
            "cat: /nope: No such file or directory\ncat: /etc: Is a directory\n");
  EXPECT_EQ(two.exit_code, 1);
  ExecStartRequest in;
  in.argv = {"cat"};
  in.stdin_data = Bytes{'i', 'n'};
  EXPECT_EQ(Str(RunExec(*c, in).stdout_data), "in");
  // Streamed stdin reaches no built-in: the exec already ended; it is dropped.
  ExecStartRequest streamed;
  streamed.argv = {"echo", "s"};
  streamed.stdin_streamed = true;
  client::ExecIo io;
  int chunks = 0;
  io.next_stdin = [&]() -> std::optional<Bytes> {
    if (chunks++ == 0) return Bytes{'x'};
    return std::nullopt;
  };
  EXPECT_EQ(Str(RunExec(*c, streamed, io).stdout_data), "s\n");
  EXPECT_TRUE(c->Ping().ok());
}

TEST(TestGuestExec, Sha256sumOfRamFilesAndStdin) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->WriteFile("/abc", Bytes{'a', 'b', 'c'}).ok());
  auto r = RunExec(*c, {"sha256sum", "/abc", "/missing"});
  EXPECT_EQ(Str(r.stdout_data),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  /abc\n");
  EXPECT_EQ(Str(r.stderr_data), "sha256sum: /missing: No such file or directory\n");
  EXPECT_EQ(r.exit_code, 1);
  ExecStartRequest in;
  in.argv = {"sha256sum"};
  EXPECT_EQ(Str(RunExec(*c, in).stdout_data),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  -\n");
}

TEST(TestGuestExec, OutputLimitTruncatesAndLargeOutputIsChunked) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  ExecStartRequest req;
  req.argv = {"echo", std::string(70000, 'z')};  // above the 64 KiB output cap
  auto r = RunExec(*c, req);
  EXPECT_EQ(r.stdout_data.size(), 64u * 1024);
  EXPECT_TRUE(r.truncated);
  req.argv = {"echo", "abcdef"};
  req.output_limit = 3;
  r = RunExec(*c, req);
  EXPECT_EQ(Str(r.stdout_data), "abc");
  EXPECT_TRUE(r.truncated);
}

TEST(TestGuestExec, OutputIsChunkedToTheClientsLimit) {
  Harness h;
  client::ClientOptions small;
  small.max_payload = protocol::kMinPayloadLimit;
  auto c = h.Connect(small);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->WriteFile("/big", Pattern(50000, 9)).ok());
  client::ExecIo io;
  Bytes got;
  int frames = 0;
  io.on_output = [&](protocol::OutputStream stream, protocol::ByteSpan data) {
    EXPECT_EQ(stream, protocol::OutputStream::kStdout);
    EXPECT_LE(data.size(), protocol::kMinPayloadLimit);
    got.insert(got.end(), data.begin(), data.end());
    ++frames;
  };
  ExecStartRequest req;
  req.argv = {"cat", "/big"};
  auto r = RunExec(*c, req, io);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(got, Pattern(50000, 9));
  EXPECT_GE(frames, 13);
}

TEST(TestGuestExec, BackgroundShellAndBadRequests) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  ExecStartRequest bg;
  bg.argv = {"echo", "quiet"};
  bg.background = true;
  auto r = c->Exec(bg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->exit_code.has_value());
  EXPECT_TRUE(r->stdout_data.empty());
  ExecStartRequest sh;
  sh.shell_command = "echo hi";
  EXPECT_EQ(c->Exec(sh).status().code(), StatusCode::kUnimplemented);
  // SIGNAL names an exec that already finished.
  EXPECT_EQ(c->SignalExec(r->exec_id, 9).code(), StatusCode::kNotFound);
  // Raw: empty argv[0], NUL in an argument, argv and shell together.
  for (const Bytes& payload :
       {protocol::TlvBuilder().Str(protocol::Tag::kArgv, "").Take(),
        protocol::TlvBuilder().Bytes(protocol::Tag::kArgv, Bytes{'a', 0, 'b'}).Take(),
        protocol::TlvBuilder().Str(protocol::Tag::kArgv, "true").Str(protocol::Tag::kShellCommand, "x").Take(),
        protocol::TlvBuilder().Take()}) {
    protocol::Frame f;
    f.type = protocol::MsgType::kExecStart;
    f.id = 900;
    f.payload = payload;
    auto reply = c->RawExchange(900, *protocol::EncodeFrame(f));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->type, protocol::MsgType::kError);
    EXPECT_EQ(protocol::ErrorReply::Decode(reply->payload)->code,
              protocol::ErrorCode::kInvalidArgument);
  }
  EXPECT_TRUE(c->Ping().ok());
}

}  // namespace
}  // namespace kubicle::guest::testguest
