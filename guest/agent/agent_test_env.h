// Test support: runs kubicle-agent as a host process on a Unix socket in a
// private temporary directory, and connects the real AgentClient to it.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "guest/client/agent_client.h"

namespace kubicle::guest::agent::testing {

class AgentProcess {
 public:
  // Starts the agent with --unix <dir>/agent.sock --no-set-clock plus, as
  // root, --unshare-uts (so POST_RESTORE's sethostname stays private), else
  // --no-set-hostname. Waits until the socket accepts connections.
  static Result<std::unique_ptr<AgentProcess>> Start(std::vector<std::string> extra_args = {});
  ~AgentProcess();

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  const std::string& socket_path() const { return socket_; }
  bool private_uts() const { return private_uts_; }
  Result<std::unique_ptr<client::AgentClient>> Connect(client::ClientOptions options = {}) const;
  // True while the agent process has not exited.
  bool alive();

 private:
  AgentProcess() = default;
  pid_t pid_ = -1;
  std::string dir_;
  std::string socket_;
  bool private_uts_ = false;
};

// One agent and one connected client per test.
class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::string Path(const std::string& name) const { return agent_->dir() + "/" + name; }
  // Runs a shell command and returns the result (asserting the call worked).
  client::ExecResult Shell(const std::string& cmd, uint64_t timeout_ms = 0);

  std::unique_ptr<AgentProcess> agent_;
  std::unique_ptr<client::AgentClient> client_;
};

// Whole-file helpers for checking what the agent did on disk.
std::string ReadLocalFile(const std::string& path);
void WriteLocalFile(const std::string& path, const std::string& data);
std::string ToString(const protocol::Bytes& b);
protocol::Bytes RandomBytes(size_t n, uint32_t seed);
// True when `pid` no longer exists (not even as a zombie), waiting up to 5 s.
bool ProcessGone(pid_t pid);

}  // namespace kubicle::guest::agent::testing
