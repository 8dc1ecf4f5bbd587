// kubicle-agent exec, run as a host process and driven by AgentClient.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "guest/agent/agent_test_env.h"

namespace kubicle::guest::agent::testing {
namespace {

using namespace std::chrono_literals;
using client::DeadlineIn;
using protocol::ExecStartRequest;

TEST_F(AgentTest, ArgvRunsWithStdoutStderrAndExitCode) {
  ExecStartRequest req;
  req.argv = {"/bin/sh", "-c", "echo out; echo err >&2; exit 3"};
  auto r = client_->Exec(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ToString(r->stdout_data), "out\n");
  EXPECT_EQ(ToString(r->stderr_data), "err\n");
  ASSERT_TRUE(r->exit_code.has_value());
  EXPECT_EQ(*r->exit_code, 3);
  EXPECT_FALSE(r->signal.has_value());
  EXPECT_FALSE(r->timed_out);
  EXPECT_FALSE(r->truncated);
  EXPECT_GT(r->pid, 0u);
}

TEST_F(AgentTest, ProgramIsFoundOnPath) {
  ExecStartRequest req;
  req.argv = {"printf", "%s-%s", "a b", "c"};
  auto r = client_->Exec(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ToString(r->stdout_data), "a b-c");
  EXPECT_EQ(r->exit_code, 0);
}

TEST_F(AgentTest, ShellCommandGetsEnvAndCwd) {
  ExecStartRequest req;
  req.shell_command = "echo \"$GREETING\"; pwd";
  req.env = {"GREETING=hello world"};
  req.cwd = agent_->dir();
  auto r = client_->Exec(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ToString(r->stdout_data), "hello world\n" + agent_->dir() + "\n");
}

TEST_F(AgentTest, MissingProgramAndBadCwdAreErrorsNotCrashes) {
  ExecStartRequest req;
  req.argv = {"/no/such/program"};
  auto r = client_->Exec(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  req.argv = {"no-such-program-on-path"};
  r = client_->Exec(req);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  req.argv = {"/bin/true"};
  req.cwd = "/no/such/dir";
  r = client_->Exec(req);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  EXPECT_TRUE(client_->Ping().ok());
}

TEST_F(AgentTest, InlineStdin) {
  ExecStartRequest req;
  req.argv = {"cat"};
  const std::string text = "line one\nline two\n";
  req.stdin_data.assign(text.begin(), text.end());
  auto r = client_->Exec(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ToString(r->stdout_data), text);
}

TEST_F(AgentTest, StreamedStdinOfSeveralMegabytes) {
  const protocol::Bytes data = RandomBytes(3 << 20, 11);
  ExecStartRequest req;
  req.argv = {"cat"};
  req.stdin_streamed = true;
  size_t sent = 0;
  client::ExecIo io;
  io.next_stdin = [&]() -> std::optional<protocol::Bytes> {
    if (sent == data.size()) return std::nullopt;
    const size_t n = std::min<size_t>(200 * 1024, data.size() - sent);
    protocol::Bytes piece(data.begin() + sent, data.begin() + sent + n);
    sent += n;
    return piece;
  };
  auto r = client_->Exec(req, io, DeadlineIn(30s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, data);
  EXPECT_EQ(r->exit_code, 0);
}

TEST_F(AgentTest, DeathBySignalIsReported) {
  auto r = Shell("kill -TERM $$");
  ASSERT_TRUE(r.signal.has_value());
  EXPECT_EQ(*r.signal, uint32_t(SIGTERM));
  EXPECT_FALSE(r.exit_code.has_value());
  EXPECT_FALSE(r.timed_out);
}

TEST_F(AgentTest, TimeoutKillsTheWholeProcessTree) {
  // The shell starts a grandchild and waits: both must die at the timeout.
  auto r = Shell("sleep 1000 & echo $!; wait", 300);
  EXPECT_TRUE(r.timed_out);
  ASSERT_TRUE(r.signal.has_value());
  EXPECT_EQ(*r.signal, uint32_t(SIGKILL));
  const pid_t grandchild = pid_t(std::stol(ToString(r.stdout_data)));
  ASSERT_GT(grandchild, 1);
  EXPECT_TRUE(ProcessGone(grandchild)) << "grandchild " << grandchild << " survived the timeout";
}

TEST_F(AgentTest, ForegroundExecTakesItsLeftoversWithIt) {
  auto r = Shell("sleep 1000 >/dev/null 2>&1 & echo $!");
  EXPECT_EQ(r.exit_code, 0);
  const pid_t orphan = pid_t(std::stol(ToString(r.stdout_data)));
  EXPECT_TRUE(ProcessGone(orphan)) << "process " << orphan << " outlived its foreground exec";
}

TEST_F(AgentTest, BackgroundExecOutlivesTheExecAndTheConnection) {
  const std::string flag = Path("bg-done");
  ExecStartRequest req;
  req.shell_command = "sleep 0.3; echo finished > " + flag;
  req.background = true;
  auto r = client_->Exec(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->pid, 0u);
  EXPECT_FALSE(r->exit_code.has_value());  // no exit is reported for background execs
  client_.reset();                          // the connection goes away at once
  for (int i = 0; i < 500 && ReadLocalFile(flag).empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(ReadLocalFile(flag), "finished\n");
  EXPECT_TRUE(ProcessGone(pid_t(r->pid)));  // and it was reaped
}

TEST_F(AgentTest, ClosingTheConnectionKillsItsForegroundExecs) {
  // Start an exec by hand so this test can drop the connection mid-exec.
  ExecStartRequest req;
  req.shell_command = "sleep 1000";
  auto frame = protocol::EncodeFrame(protocol::MakeFrame(req, 4242));
  ASSERT_TRUE(frame.ok());
  auto started = client_->RawExchange(4242, *frame);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ASSERT_EQ(started->type, protocol::MsgType::kExecStart);
  auto reply = protocol::ExecStartReply::Decode(started->payload);
  ASSERT_TRUE(reply.ok());
  ASSERT_TRUE(::kill(pid_t(reply->pid), 0) == 0);
  client_.reset();
  EXPECT_TRUE(ProcessGone(pid_t(reply->pid)));
}

TEST_F(AgentTest, LargeOutputOnBothStreams) {
  const protocol::Bytes data = RandomBytes(6 << 20, 5);
  WriteLocalFile(Path("big"), std::string(data.begin(), data.end()));
  auto r = Shell("cat " + Path("big") + "; cat " + Path("big") + " >&2");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data, data);
  EXPECT_EQ(r.stderr_data, data);
  EXPECT_FALSE(r.truncated);
}

TEST_F(AgentTest, OutputLimitTruncatesButTheProcessFinishes) {
  ExecStartRequest req;
  req.shell_command = "head -c 300000 /dev/zero; echo tail >&2";
  req.output_limit = 1000;
  auto r = client_->Exec(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data.size() + r->stderr_data.size(), 1000u);
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(r->exit_code, 0);
}

TEST_F(AgentTest, ExecsRunConcurrentlyOnOneConnection) {
  // The waiter can only finish if the toucher runs while it is still waiting.
  const std::string flag = Path("go");
  client::ExecResult waiter;
  std::thread t([&] { waiter = Shell("while [ ! -e " + flag + " ]; do sleep 0.01; done; echo ok"); });
  std::this_thread::sleep_for(100ms);
  auto toucher = Shell("touch " + flag);
  t.join();
  EXPECT_EQ(toucher.exit_code, 0);
  EXPECT_EQ(ToString(waiter.stdout_data), "ok\n");
}

TEST_F(AgentTest, ManyExecsOnSeveralConnectionsAreRoutedCorrectly) {
  std::vector<std::unique_ptr<client::AgentClient>> clients;
  for (int i = 0; i < 3; ++i) {
    auto c = agent_->Connect();
    ASSERT_TRUE(c.ok());
    clients.push_back(std::move(*c));
  }
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 24; ++i) {
    threads.emplace_back([&, i] {
      ExecStartRequest req;
      req.shell_command = "sleep 0.0" + std::to_string(i % 10) + "; echo " + std::to_string(i);
      auto r = clients[size_t(i) % clients.size()]->Exec(req, {}, DeadlineIn(30s));
      if (r.ok() && ToString(r->stdout_data) == std::to_string(i) + "\n") ++good;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 24);
}

TEST_F(AgentTest, SignalExecDeliversToTheProcessGroup) {
  std::atomic<uint32_t> exec_id{0};
  client::ExecIo io;
  io.on_started = [&](uint32_t id, uint32_t) { exec_id = id; };
  ExecStartRequest req;
  req.shell_command = "sleep 1000";
  client::ExecResult result;
  std::thread t([&] {
    auto r = client_->Exec(req, io, DeadlineIn(20s));
    if (r.ok()) result = std::move(*r);
  });
  while (exec_id.load() == 0) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(client_->SignalExec(exec_id, SIGTERM).ok());
  t.join();
  ASSERT_TRUE(result.signal.has_value());
  EXPECT_EQ(*result.signal, uint32_t(SIGTERM));
  auto s = client_->SignalExec(987654, SIGTERM);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
}

}  // namespace
}  // namespace kubicle::guest::agent::testing
