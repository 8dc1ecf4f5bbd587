// Child processes for the e2e harness: spawn with output to a log file, die
// with the parent (PR_SET_PDEATHSIG, so a crashed test leaves no etcd or
// apiserver behind), stop with SIGTERM then SIGKILL after a grace period.
// RunCommand runs a tool (kubectl, helm, openssl) to completion and
// captures its output.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::e2e {

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() { Stop(std::chrono::seconds(5)); }
  ChildProcess(ChildProcess&& o) noexcept : pid_(o.pid_), name_(std::move(o.name_)) { o.pid_ = -1; }
  ChildProcess& operator=(ChildProcess&& o) noexcept;

  static Result<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                    const std::string& log_path);
  bool Running();
  // SIGTERM, wait up to `grace`, then SIGKILL. Idempotent.
  void Stop(std::chrono::milliseconds grace);
  void Kill() { Stop(std::chrono::milliseconds(0)); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string name_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

// Runs argv with `input` on stdin; fails only when it cannot be started or
// exceeds `timeout` (then it is killed).
Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::string& input = {},
                                 std::chrono::seconds timeout = std::chrono::seconds(120));

// A loopback TCP port that was free a moment ago.
Result<int> FreePort();

}  // namespace kubicle::e2e
