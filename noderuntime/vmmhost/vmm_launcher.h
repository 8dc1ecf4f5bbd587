// VmmLauncher: the node runtime's seam over kubicle-vmm processes, in the
// manner of LevelDB's Env and KubeVirt's launcher client. Everything the
// runtime (SandboxManager, WarmPool, the template bake, the sweepers) does to
// a VMM *as a process* goes through it: start one, take hold of one it did
// not start (a fork child, a VMM an earlier daemon left), signal, reap, watch
// for its exit, and find the VMMs of a state directory. What the runtime says
// to a VMM goes through its sockets, as before: the control socket
// (vmm::control::ControlClient) and the guest agent (AgentClient).
//
// ProcessVmmLauncher is the real one (vmm_process.h: posix_spawn, pidfds,
// /proc). FakeVmmLauncher (noderuntime/testing/) simulates VMMs in the test
// process behind real sockets, so create, fork, adopt, TTL and crash
// handling have fast unit tests with no /dev/kvm.
//
// Contracts:
//  - A VmmProcess refers to one process for its whole life, never to a
//    reused pid. exit_fd() is valid as long as the object and becomes
//    readable (POLLIN) once the process has exited, so ProcessWatcher and
//    WaitExited serve real and fake VMMs alike.
//  - Destroying a VmmProcess neither kills nor reaps: VMMs outlive the
//    daemon (docs/node.md, "Re-adoption").
//  - Every method of both classes is thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "vmm/launch_spec.h"

namespace kubicle::noderuntime {

// One kubicle-vmm process the node supervises.
class VmmProcess {
 public:
  virtual ~VmmProcess() = default;

  virtual pid_t pid() const = 0;
  // The kernel's start time of the process (/proc/<pid>/stat field 22), so
  // a later daemon can tell this process from another of the same pid.
  virtual uint64_t start_time() const = 0;
  // Readable once the process has exited (a pidfd for a real process).
  virtual int exit_fd() const = 0;
  // Ok if the process already exited.
  virtual Status Signal(int sig) = 0;
  // Its exit code (0-255, or 128 + signal) if it has exited and is this
  // node's to reap, once; nullopt while it runs or when someone else reaped
  // it (ProcessWatcher reaps the processes it watches).
  virtual std::optional<int> Reap() = 0;
};

class VmmLauncher {
 public:
  virtual ~VmmLauncher() = default;

  // Starts the VMM `spec` describes (`kubicle-vmm <spec.ToArgv()...>`)
  // detached: its own session, stdin from /dev/null, stdout and stderr
  // appended to log_path, no fd of ours.
  virtual Result<std::unique_ptr<VmmProcess>> Spawn(const vmm::LaunchSpec& spec,
                                                    const std::string& log_path) = 0;
  // Takes hold of a VMM this launcher did not start. NotFound if there is no
  // such process or, with expected_start_time, if the pid now names another.
  virtual Result<std::unique_ptr<VmmProcess>> Attach(
      pid_t pid, std::optional<uint64_t> expected_start_time) = 0;
  // Pids of the running VMMs one of whose arguments lies under state_dir.
  virtual std::vector<pid_t> FindVmms(const std::string& state_dir) = 0;
  // Seconds since the process started (0 if unknown).
  virtual double AgeSeconds(pid_t pid) = 0;
};

// The real launcher: kubicle-vmm processes from `vmm_binary`.
class ProcessVmmLauncher final : public VmmLauncher {
 public:
  // InvalidArgument unless vmm_binary is an executable file.
  static Result<std::unique_ptr<ProcessVmmLauncher>> Create(std::string vmm_binary);

  Result<std::unique_ptr<VmmProcess>> Spawn(const vmm::LaunchSpec& spec,
                                            const std::string& log_path) override;
  Result<std::unique_ptr<VmmProcess>> Attach(pid_t pid,
                                             std::optional<uint64_t> expected_start_time) override;
  std::vector<pid_t> FindVmms(const std::string& state_dir) override;
  double AgeSeconds(pid_t pid) override;

  const std::string& vmm_binary() const { return vmm_binary_; }

 private:
  explicit ProcessVmmLauncher(std::string vmm_binary) : vmm_binary_(std::move(vmm_binary)) {}
  std::string vmm_binary_;
};

}  // namespace kubicle::noderuntime
