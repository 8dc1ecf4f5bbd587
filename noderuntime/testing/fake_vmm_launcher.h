// FakeVmmLauncher: kubicle-vmm simulated inside the test process, for the
// node runtime's unit tests (no /dev/kvm, no processes, milliseconds per
// sandbox). It implements VmmLauncher (noderuntime/vmmhost/vmm_launcher.h);
// what the runtime says to a VMM still goes over real sockets, so the
// runtime's own ControlClient and AgentClient code runs unchanged:
//  - each fake VM serves the real control protocol (vmm/control_protocol.h)
//    on the control socket its launch spec names;
//  - once it runs (booted by `run`, restored, or forked) it serves the test
//    guest's agent (guest/testguest/agent.h, the very code the tiny guest
//    runs: ping, RAM files, built-in exec, POST_RESTORE) on its vsock Unix
//    socket, behind Firecracker's "CONNECT <port>" handshake.
//
// Understood: launch specs (vmm/launch_spec.h) of mode pool (mem, vCPUs,
// control socket, id: status, restore, shutdown) and run (control socket,
// vsock socket, CID: a booted VM: status, snapshot, fork, pause, resume,
// shutdown), read as typed fields, never from an argv. A snapshot
// writes <dir>/state and <dir>/memory; restore refuses a directory without
// `state`. Fork makes one new fake VM per child with a fresh agent (memory
// is not copied: a child's RAM files start empty).
//
// Contracts: the launcher must outlive every SandboxManager that uses it,
// and its VMs outlive the managers (as real VMMs outlive the daemon), so a
// test can reopen a manager over the same state directory and see its VMs
// re-adopted. The destructor stops every VM and joins every thread. Fake
// pids are above the kernel's pid_max, so they never name a real process.
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "noderuntime/vmmhost/vmm_launcher.h"
#include "vmm/control_protocol.h"

namespace kubicle::noderuntime::testing {

class FakeVm;

class FakeVmmLauncher final : public VmmLauncher {
 public:
  // What a fake VM does when a control command arrives.
  enum class Fault {
    kError,  // answers {"ok": false, "error": "injected fault"}
    kCrash,  // exits with code 134 (SIGABRT) without answering
  };

  // A fake VM as a test sees it.
  struct VmInfo {
    pid_t pid = 0;
    std::string id;    // --id, then the restore's id
    std::string mode;  // "pool", "run" or "fork"
    std::string state; // "pooled", "running", "paused" or "exited"
    uint64_t cid = 0;
    std::string control_path;  // as bound (the node renames a pool VM's)
    std::string vsock_path;
    std::optional<int> exit_code;
    // The network attachment: the spec's net of `run` (its MAC as
    // aa:bb:cc:dd:ee:ff), a restore's or a fork child's.
    std::optional<vmm::control::NetAttachment> net;
    std::string cmdline;  // the spec's cmdline of `run` ("" for a pool VM)
    std::string seccomp;  // the spec's seccomp mode ("enforce", "log", "off")
  };

  FakeVmmLauncher();
  ~FakeVmmLauncher() override;
  FakeVmmLauncher(const FakeVmmLauncher&) = delete;
  FakeVmmLauncher& operator=(const FakeVmmLauncher&) = delete;

  Result<std::unique_ptr<VmmProcess>> Spawn(const vmm::LaunchSpec& spec,
                                            const std::string& log_path) override;
  Result<std::unique_ptr<VmmProcess>> Attach(pid_t pid,
                                             std::optional<uint64_t> expected_start_time) override;
  std::vector<pid_t> FindVmms(const std::string& state_dir) override;
  double AgeSeconds(pid_t pid) override;

  // ---- for tests ----
  // The VM exits now with `code` (0-255, or 128 + signal), as a crash would.
  // False if no such running VM.
  bool Crash(pid_t pid, int code = 128 + 9);
  // The next `cmd` ("restore", "fork", "snapshot", ...) any VM receives fails.
  void InjectFault(const std::string& cmd, Fault fault);
  // Spawn fails with this status while set (a broken binary or host).
  void FailSpawns(std::optional<Status> status);
  // Every VM looks this much older to AgeSeconds (orphan sweeps).
  void AddAge(double seconds) { age_offset_ = age_offset_ + seconds; }

  std::vector<VmInfo> Vms() const;  // every VM ever started, exited ones too
  std::optional<VmInfo> Vm(pid_t pid) const;
  size_t running() const;           // VMs that have not exited
  size_t spawned() const { return spawned_; }

 private:
  friend class FakeVm;
  std::shared_ptr<FakeVm> Find(pid_t pid) const;
  // Called by a VM for each command: the fault armed for it, if any.
  std::optional<Fault> TakeFault(const std::string& cmd);
  std::shared_ptr<FakeVm> NewVm(vmm::LaunchSpec spec, std::string mode, std::string log_path);

  mutable std::mutex mu_;
  std::map<pid_t, std::shared_ptr<FakeVm>> vms_;
  std::map<std::string, Fault> faults_;
  std::optional<Status> spawn_error_;
  pid_t next_pid_ = 5'000'000;  // pid_max is at most 4,194,304
  uint64_t next_start_ = 1;
  std::atomic<size_t> spawned_{0};
  std::atomic<double> age_offset_{0};
};

}  // namespace kubicle::noderuntime::testing
