// VmProcess: runs one kubicle-vmm process for tests and benchmarks — a
// private scratch directory for its sockets and serial log, helpers to wait
// for serial output, talk to its control socket, and connect an AgentClient
// over its vsock socket. The destructor kills the process (SIGKILL) if it is
// still running, reaps it and removes the scratch directory: nothing leaks.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "guest/client/agent_client.h"
#include "vmm/control_client.h"

namespace kubicle::vmm::testing {

struct VmProcessOptions {
  std::string vmm_binary;  // path to kubicle-vmm
  std::string kernel;      // guest kernel (the test guest by default)
  std::string mem = "64M";
  int vcpus = 1;
  uint64_t cid = 3;
  std::vector<std::string> disks;       // "path" or "path,ro"
  std::vector<std::string> extra_args;  // appended verbatim
  std::string cmdline = "console=ttyS0";
  // When set: `kubicle-vmm restore --snapshot restore_from` with this
  // process's own sockets and cid (kernel, mem, vcpus, disks, cmdline unused).
  std::string restore_from;
  // When set: `kubicle-vmm pool` (mem, vcpus, sockets and cid as above);
  // send a control::RestoreRequest through control().
  bool pool = false;
};

class VmProcess {
 public:
  // Starts kubicle-vmm with serial, vsock and control sockets in a new scratch dir.
  static Result<std::unique_ptr<VmProcess>> Start(const VmProcessOptions& options);
  ~VmProcess();

  // Takes charge of a kubicle-vmm process this process did not start (a fork
  // child) whose sockets are in dir with the usual names: Kill signals it,
  // the destructor kills it and removes dir. Wait is not available.
  static std::unique_ptr<VmProcess> Attach(pid_t pid, const std::string& dir);

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string vsock_path() const { return dir_ + "/vsock.sock"; }
  std::string control_path() const { return dir_ + "/control.sock"; }
  std::string serial_path() const { return dir_ + "/serial.log"; }

  // Everything the guest printed so far.
  std::string SerialOutput() const;
  // kubicle-vmm's own stderr (logs and error messages).
  std::string VmmLog() const;
  // Waits until the serial output contains needle (or the process exits).
  Status WaitForSerial(const std::string& needle, std::chrono::milliseconds timeout);
  // Connects to the agent, retrying until it answers or the timeout expires.
  Result<std::unique_ptr<guest::client::AgentClient>> ConnectAgent(
      std::chrono::milliseconds timeout);
  // Waits until the control socket answers "status".
  Status WaitForControl(std::chrono::milliseconds timeout);
  // The typed client of this VMM's control socket (control_client.h).
  control::ControlClient control() const { return control::ControlClient(control_path()); }
  // Wire level, for tests of the server's own validation (and scripts that
  // speak JSON): sends request as one line and returns the reply parsed,
  // {"ok": false} replies included. Uses control()'s transport.
  Result<nlohmann::json> Control(const nlohmann::json& request);

  // Waits for the process to exit; returns its exit code (128+signal if killed).
  Result<int> Wait(std::chrono::milliseconds timeout);
  // The process's exit code once it has exited.
  std::optional<int> exit_code() const { return exit_code_; }
  void Kill();

 private:
  VmProcess() = default;
  bool Reap(bool block);

  pid_t pid_ = -1;
  bool attached_ = false;
  std::string dir_;
  std::optional<int> exit_code_;
};

}  // namespace kubicle::vmm::testing
