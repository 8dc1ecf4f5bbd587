// DaemonProcess: runs a kubicle-node binary as a child process for tests and
// benchmarks, and waits for the "listening on URL" line it prints.
//
// Contracts: the destructor SIGKILLs and reaps a still-running daemon (its
// VMMs are the caller's to clean up: they outlive the daemon by design).
// stderr goes to `log_path` so a failing test can show it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime::daemon {

class DaemonProcess {
 public:
  // Starts `binary serve <args>` and waits up to `timeout` for its URL.
  static Result<std::unique_ptr<DaemonProcess>> Start(const std::string& binary,
                                                      const std::vector<std::string>& args,
                                                      const std::string& log_path,
                                                      std::chrono::milliseconds timeout);
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // The exit code (128 + signal when killed), or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);

 private:
  DaemonProcess() = default;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string url_;
};

}  // namespace kubicle::noderuntime::daemon
