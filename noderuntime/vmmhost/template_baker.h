// TemplateBaker: turns a TemplateSpec into a template snapshot. A bake is a
// cold boot of `kubicle-vmm run` (through VmmLauncher), the agent answering,
// the warm-up commands run through it, a snapshot of the paused VM, the VM
// shut down, and the content digest of the snapshot's state and memory.
//
// The baker knows nothing of the node's template map or sandboxes:
// SandboxManager keeps each template's state and persists it, and calls
// Bake on a worker thread per template.
//
// Contracts:
//  - Bake blocks for the whole bake and leaves either a complete snapshot
//    directory (and the digest) or no snapshot directory (and why); the
//    bake's scratch files (<dir>/bake: vmm.log, serial.log) are kept only
//    when it failed. Whatever a half-done earlier bake left is removed first.
//  - The bake's VMM never outlives Bake; while it runs its pid is listed by
//    pids(), so the orphan sweep leaves it alone.
//  - Stop() makes bakes in progress fail fast (Unavailable). Thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "guest/client/agent_client.h"
#include "noderuntime/sandbox_service.h"
#include "noderuntime/vmmhost/vmm_launcher.h"
#include "vmm/launch_spec.h"

namespace kubicle::noderuntime {

class TemplateBaker {
 public:
  struct Options {
    VmmLauncher* launcher = nullptr;     // not owned; outlives the baker
    std::string sock_dir;                // the VM's control and vsock sockets
    // What every VMM of the node gets (console limits, seccomp); the baker
    // makes it a `run` spec and fills in the machine and its sockets.
    vmm::LaunchSpec vmm_base;
    // Boot to agent answering; also each warm-up command's limit.
    std::chrono::milliseconds boot_timeout{120000};
    guest::client::ClientOptions agent_options;
    // The VM's vsock CID, from the node's allocator, given back after.
    std::function<uint32_t()> allocate_cid;
    std::function<void(uint32_t)> release_cid;
  };
  // A network device for the bake (the node's sandbox network is on): the
  // snapshot then has one, and the guest its addresses from `cmdline`.
  struct Nic {
    std::string tap, mac, netns;  // kubicle-vmm's --net tap=,mac=,netns=
    std::string cmdline;          // appended to the kernel command line
  };
  // Called at each step ("booting", "warm-up 1/2: ...", "snapshotting").
  using Progress = std::function<void(const std::string& step)>;

  explicit TemplateBaker(Options options) : options_(std::move(options)) {}
  TemplateBaker(const TemplateBaker&) = delete;
  TemplateBaker& operator=(const TemplateBaker&) = delete;

  // Bakes `spec` into `snapshot_dir`, with its scratch files and disk layers
  // under `dir` (the template's directory). Returns "sha256:<hex>".
  Result<std::string> Bake(const TemplateSpec& spec, const std::string& dir,
                           const std::string& snapshot_dir, const Progress& progress,
                           const std::optional<Nic>& nic = std::nullopt);
  void Stop() { stopping_ = true; }
  std::vector<pid_t> pids() const;

 private:
  Result<vmm::LaunchSpec> VmmSpec(const TemplateSpec& spec, const std::string& dir, uint32_t cid,
                                  const std::string& control, const std::string& vsock,
                                  const std::optional<Nic>& nic) const;
  // Boot to snapshot in the started VM.
  Status BakeInVm(const TemplateSpec& spec, int exit_fd, const std::string& control,
                  const std::string& vsock, const std::string& snapshot_dir, const Progress& progress);
  Status RunWarmUp(guest::client::AgentClient& agent, const std::string& command);

  Options options_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::set<pid_t> pids_;  // guarded by mu_
};

}  // namespace kubicle::noderuntime
