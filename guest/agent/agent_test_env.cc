#include "guest/agent/agent_test_env.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace kubicle::guest::agent::testing {

using namespace std::chrono_literals;

Result<std::unique_ptr<AgentProcess>> AgentProcess::Start(std::vector<std::string> extra_args) {
  std::unique_ptr<AgentProcess> p(new AgentProcess());
  char tmpl[] = "/tmp/kubicle-agent-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return Status::FromErrno("mkdtemp");
  p->dir_ = tmpl;
  p->socket_ = p->dir_ + "/agent.sock";
  p->private_uts_ = ::geteuid() == 0;
  // KUBICLE_AGENT_BIN in the environment runs another build of the agent
  // (e.g. one with sanitizers, which cannot be linked statically).
  const char* bin = std::getenv("KUBICLE_AGENT_BIN");
  std::vector<std::string> args = {bin != nullptr ? bin : KUBICLE_AGENT_BIN, "--unix", p->socket_,
                                   "--no-set-clock",
                                   "--log-level", "warn"};
  args.push_back(p->private_uts_ ? "--unshare-uts" : "--no-set-hostname");
  for (auto& a : extra_args) args.push_back(std::move(a));
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  p->pid_ = ::fork();
  if (p->pid_ < 0) return Status::FromErrno("fork");
  if (p->pid_ == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto c = p->Connect();
    if (c.ok()) return p;
    if (!p->alive()) return Status::Internal("kubicle-agent exited during startup");
    std::this_thread::sleep_for(10ms);
  }
  return Status::DeadlineExceeded("kubicle-agent did not start listening");
}

AgentProcess::~AgentProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 500; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) break;
      if (i == 300) ::kill(pid_, SIGKILL);
      std::this_thread::sleep_for(10ms);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

bool AgentProcess::alive() {
  int status = 0;
  if (pid_ <= 0) return false;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

Result<std::unique_ptr<client::AgentClient>> AgentProcess::Connect(
    client::ClientOptions options) const {
  return client::AgentClient::ConnectUnix(socket_, std::move(options),
                                          client::DeadlineIn(std::chrono::milliseconds(5000)));
}

void AgentTest::SetUp() {
  auto p = AgentProcess::Start();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  agent_ = std::move(*p);
  auto c = agent_->Connect();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  client_ = std::move(*c);
}

void AgentTest::TearDown() {
  client_.reset();
  if (agent_) {
    EXPECT_TRUE(agent_->alive()) << "the agent died during the test";
  }
  agent_.reset();
}

client::ExecResult AgentTest::Shell(const std::string& cmd, uint64_t timeout_ms) {
  protocol::ExecStartRequest req;
  req.shell_command = cmd;
  req.timeout_ms = timeout_ms;
  auto r = client_->Exec(req, {}, client::DeadlineIn(std::chrono::milliseconds(30000)));
  EXPECT_TRUE(r.ok()) << cmd << ": " << r.status().ToString();
  return r.ok() ? std::move(*r) : client::ExecResult{};
}

std::string ReadLocalFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteLocalFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
}

std::string ToString(const protocol::Bytes& b) { return std::string(b.begin(), b.end()); }

protocol::Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  protocol::Bytes out(n);
  for (auto& b : out) b = uint8_t(rng());
  return out;
}

bool ProcessGone(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (::kill(pid, 0) < 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace kubicle::guest::agent::testing
