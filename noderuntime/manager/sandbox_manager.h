// SandboxManager: the node runtime behind SandboxService. It keeps the
// node's templates (each baked once: TemplateBaker) and sandboxes (the
// SandboxTable), decides each call's lifecycle (validation, admission,
// records, what a failure undoes) and proxies exec and file calls to each
// guest's agent. The jobs are its collaborators', one each:
//   SandboxStarter   a VM under a sandbox: restore into a warm-pool VMM
//                    (create, run, resume) or fork of a running source
//   Suspender        suspend to a snapshot on the node's disk, resume
//   VmSupervisor     each VMM's exit watched, stops, teardown
//   Adopter          what Open finds in the state directory
//   SandboxNetworks, SandboxWorkspaces  a sandbox's network slot and
//                    workspace, attached, re-adopted, released
// Its periodic sweeps (TTL, orphans, busy cgroups) run in a Sweeper
// (sandbox_sweeper.h), to which it answers as the SweepTarget.
//
// Contracts (in addition to SandboxService's):
//  - Everything lives under NodeConfig::state_dir (docs/node.md, "State
//    directory"). VMM processes are detached and outlive the manager:
//    Shutdown(false) leaves them running and a later Open() on the same
//    directory re-adopts them (pid + start time, control socket, agent).
//  - Open() kills VMMs of this state directory that no record owns (stale
//    pool VMs, orphans of a crash mid-create) and marks sandboxes whose VMM
//    is gone Failed, with the reason.
//  - A VMM that exits unexpectedly turns its sandbox Failed with the reason;
//    its cgroup, sockets, CID and capacity are freed; the record stays until
//    DeleteSandbox.
//  - Capacity: memory MiB and vCPUs of live sandboxes plus the warm pool
//    never exceed NodeConfig's; creates and forks beyond it are refused with
//    ResourceExhausted (idle pool VMs of other shapes are evicted first).
//  - One manager per state directory and per metrics registry at a time.
//  - Every VMM is started, attached, signalled and found through
//    NodeConfig::launcher (vmm_launcher.h): kubicle-vmm processes by default,
//    FakeVmmLauncher in unit tests.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "noderuntime/manager/adopter.h"
#include "noderuntime/manager/sandbox_networks.h"
#include "noderuntime/manager/sandbox_starter.h"
#include "noderuntime/manager/sandbox_sweeper.h"
#include "noderuntime/manager/sandbox_workspaces.h"
#include "noderuntime/manager/suspender.h"
#include "noderuntime/manager/teardown_queue.h"
#include "noderuntime/manager/vm_supervisor.h"
#include "noderuntime/network/net_system.h"
#include "noderuntime/network/sandbox_network.h"
#include "noderuntime/sandbox_service.h"
#include "noderuntime/state/records.h"
#include "noderuntime/state/workspace_store.h"
#include "noderuntime/vmmhost/cgroups.h"
#include "noderuntime/vmmhost/process_watcher.h"
#include "noderuntime/vmmhost/template_baker.h"
#include "noderuntime/vmmhost/vmm_launcher.h"
#include "noderuntime/vmmhost/warm_pool.h"
#include "vmm/control_protocol.h"
#include "vmm/launch_spec.h"
#include "vmm/seccomp_mode.h"

namespace kubicle::noderuntime {

struct NodeConfig {
  std::string state_dir;               // absolute; created if missing
  std::string vmm_binary;              // path to kubicle-vmm
  // How VMMs are started and found; null: ProcessVmmLauncher over
  // vmm_binary. Shared so that it can outlive the manager (a test's fake
  // keeps its VMs across a reopen, as real VMMs outlive the daemon).
  std::shared_ptr<VmmLauncher> launcher;
  uint64_t capacity_mem_mib = 0;       // guest RAM of sandboxes + pool
  uint32_t capacity_vcpus = 0;
  // Node disk for suspended sandboxes' memory snapshots (docs/node.md,
  // "Suspend and resume"); 0: capacity_mem_mib (every sandbox the node can
  // run can be suspended once: a memory file is at most its guest's RAM).
  uint64_t capacity_suspend_disk_mib = 0;
  uint32_t pool_size_per_shape = 2;    // idle pool VMs kept per template shape
  std::string cgroup_root = "/sys/fs/cgroup";
  bool use_cgroups = true;
  std::string cgroup_parent = "kubicle";  // VM groups are <root>/<ctrl>/<parent>/<id>
  uint64_t cgroup_overhead_mib = 64;   // memory limit = guest RAM + this
  std::function<WallTime()> clock;     // default: system_clock::now
  std::chrono::milliseconds sweep_interval{1000};  // TTL sweeper period
  std::chrono::milliseconds agent_timeout{10000};  // restore/fork to agent answering
  std::chrono::milliseconds bake_boot_timeout{120000};
  std::chrono::milliseconds delete_grace{2000};    // shutdown request to SIGKILL
  std::chrono::seconds orphan_sweep_interval{60};  // 0: only at Open()
  std::chrono::seconds orphan_min_age{120};        // younger VMMs may be mid-create
  // Host-side caps on what a guest's agent returns (docs/node.md, "Limits").
  guest::client::ClientLimits agent_limits;
  std::chrono::milliseconds file_stream_timeout{3600000};  // one whole ReadFileStream
  // The guest console's log (<sandbox>/serial.log), passed to every
  // kubicle-vmm as --serial-max-bytes/-files/-rate/-burst (console_log.h):
  // what ReadConsole serves is bounded by these, whatever the guest writes.
  vmm::devices::legacy::ConsoleLogLimits console;
  // --seccomp of every VMM this node starts (docs/vmm.md, "Seccomp"): log
  // or off only to find what a new kernel or libc needs.
  vmm::SeccompMode vmm_seccomp = vmm::SeccompMode::kEnforce;
  SandboxNetworkConfig network;
  // ---- workspaces (docs/workspaces.md) ----
  // The sum of every workspace's size_mib may not exceed this (0: no
  // budget beyond the file system's free space, which is always checked).
  uint64_t workspace_budget_mib = 0;
  // The confined ext4 helper; empty: kubicle-ext4 beside vmm_binary.
  std::string ext4_helper;
  std::string mke2fs = "mke2fs";  // found on PATH
};

// managed_sandbox.h: what the manager and its collaborators share.
struct ManagedSandbox;
struct ManagedTemplate;
class Capacity;
class SuspendDisk;
class SandboxTable;

// What every kubicle-vmm this node starts gets: the console's limits and
// the seccomp mode; the baker and the pool fill in the rest.
vmm::LaunchSpec VmmBase(const NodeConfig& config);

class SandboxManager final : public SandboxService, private SweepTarget {
 public:
  // Creates the state directory layout and re-adopts what it holds.
  // `metrics` may be null (a private registry is used).
  static Result<std::unique_ptr<SandboxManager>> Open(NodeConfig config,
                                                      metrics::Registry* metrics);
  ~SandboxManager() override;  // Shutdown(false) if not done

  // Stops background threads and kills idle pool VMs. stop_vms=true also
  // deletes every sandbox (VM, cgroup, directory); false leaves sandbox VMs
  // running for the next Open(). Idempotent; later calls fail Unavailable.
  void Shutdown(bool stop_vms);

  Result<TemplateInfo> PutTemplate(const TemplateSpec& spec) override;
  Result<TemplateInfo> GetTemplate(const std::string& name) override;
  std::vector<TemplateInfo> ListTemplates() override;
  Status DeleteTemplate(const std::string& name) override;

  Result<SandboxInfo> CreateSandbox(const SandboxSpec& spec) override;
  Result<std::vector<SandboxInfo>> ForkSandbox(const ForkRequest& request) override;
  Result<SandboxInfo> GetSandbox(const std::string& id) override;
  Result<std::vector<SandboxInfo>> ListSandboxes(const std::string& selector) override;
  Status DeleteSandbox(const std::string& id) override;
  // The Suspender's (suspender.h).
  Result<SandboxInfo> SuspendSandbox(const std::string& id) override;
  Result<SandboxInfo> ResumeSandbox(const std::string& id) override;
  Result<std::vector<std::string>> DeleteSandboxes(const std::string& selector) override;
  bool CheckToken(const std::string& id, const std::string& token) override;
  Status SetSandboxToken(const std::string& id, const std::string& token_sha256) override;

  Result<guest::client::ExecResult> Exec(const std::string& id, const ExecOptions& options) override;
  Status WriteFile(const std::string& id, const std::string& path, guest::protocol::ByteSpan data,
                   uint32_t mode) override;
  Result<guest::protocol::Bytes> ReadFile(const std::string& id, const std::string& path) override;
  Status ReadFileStream(const std::string& id, const std::string& path,
                        const guest::client::FileChunkFn& on_chunk) override;
  // sandbox_manager_observe.cc: the console log and the cgroup's figures.
  Result<ConsoleRead> ReadConsole(const std::string& id, uint64_t offset,
                                  size_t max_bytes) override;
  Result<SandboxStats> GetSandboxStats(const std::string& id) override;
  Result<guest::protocol::StatReply> StatFile(const std::string& id,
                                              const std::string& path) override;
  Result<std::vector<guest::protocol::DirEntry>> ListFiles(const std::string& id,
                                                           const std::string& path) override;
  Status RemoveFile(const std::string& id, const std::string& path, bool recursive) override;
  Result<UniqueFd> ConnectGuestPort(const std::string& id, uint16_t port) override;
  // sandbox_manager_run.cc: per-call runs.
  Result<RunResult> Run(const RunOptions& options) override;
  Status SetRunToken(const std::string& template_name, const std::string& token_sha256) override;
  bool CheckRunToken(const std::string& template_name, const std::string& token) override;

  // ---- workspaces (docs/workspaces.md): the store's (sandbox_manager.cc) ----
  Result<WorkspaceInfo> PutWorkspace(const WorkspaceSpec& spec) override;
  Result<WorkspaceInfo> GetWorkspace(const std::string& name) override;
  std::vector<WorkspaceInfo> ListWorkspaces() override;
  Status DeleteWorkspace(const std::string& name) override;
  bool CheckWorkspaceToken(const std::string& name, const std::string& token) override;
  Status ReadWorkspaceFile(const std::string& name, const std::string& path,
                           const guest::client::FileChunkFn& on_chunk) override;
  Status WriteWorkspaceFile(const std::string& name, const std::string& path,
                            guest::protocol::ByteSpan data, uint32_t mode) override;
  Result<guest::protocol::StatReply> StatWorkspaceFile(const std::string& name,
                                                       const std::string& path) override;
  Result<std::vector<guest::protocol::DirEntry>> ListWorkspaceFiles(
      const std::string& name, const std::string& path) override;
  Status RemoveWorkspaceFile(const std::string& name, const std::string& path,
                             bool recursive) override;
  // Waits until every finished run's VM has been torn down (tests).
  void DrainRunTeardowns() { teardowns_.Drain(); }

  // Deletes sandboxes whose TTL passed (the sweeper thread does it every
  // sweep_interval; tests call it with a fake clock). Returns their ids.
  std::vector<std::string> SweepExpired() { return sweeper_->SweepExpired(); }
  // Kills VMMs of this state dir older than `min_age` that no sandbox, pool
  // VM or bake owns (the sweeper does it every orphan_sweep_interval).
  size_t SweepOrphans(std::chrono::seconds min_age) { return sweeper_->SweepOrphans(min_age); }

  struct Usage {
    uint64_t mem_mib = 0;
    uint32_t vcpus = 0;
    size_t pool_vms = 0;
    size_t watched_processes = 0;
    size_t pending_cgroups = 0;  // busy groups the sweeper retries
    uint64_t suspended_bytes = 0;       // suspended sandboxes' snapshots on disk
    uint64_t suspend_disk_bytes = 0;    // the budget for them
    network::SandboxNetwork::Census network;  // all zero with the network off
  };
  Usage usage() const;
  const NodeConfig& config() const { return config_; }
  // The sandbox network's namespaces (null when it is off).
  network::SandboxNetwork* sandbox_network() { return networks_ ? networks_->network() : nullptr; }

 private:
  using Sandbox = ManagedSandbox;
  using Template = ManagedTemplate;

  SandboxManager(NodeConfig config, metrics::Registry* metrics);
  Status Init();
  Status OpenParts();
  Status Readopt();
  // The templates of the state directory, at Open (sandbox_manager_templates.cc);
  // its sandboxes are the Adopter's (adopter.h).
  Status LoadTemplates();
  // What the sweeper (sandbox_sweeper.h) asks: sandbox_manager.cc, and
  // sandbox_manager.cc.
  std::vector<std::string> ExpiredSandboxes(WallTime now) override;
  Status DeleteExpired(const std::string& id) override { return DeleteSandbox(id); }
  std::set<pid_t> OwnedVmms() override;
  size_t SweepNetworkOrphans() override {
    network::SandboxNetwork* n = sandbox_network();
    return n ? n->SweepOrphans() : 0;
  }
  // Creation and forking (sandbox_manager_create.cc): the new sandbox and
  // its admission; its VM is the starter's.
  Result<std::shared_ptr<Sandbox>> NewSandbox(const SandboxSpec& spec, std::string* token);
  Status RegisterSandbox(const std::shared_ptr<Sandbox>& sb, std::string* snapshot_dir);
  Result<std::shared_ptr<Sandbox>> NewForkChild(const ForkRequest& request,
                                                const ForkChildSpec* spec, const Sandbox& src,
                                                std::string* token);
  // A fork child into the table, unless the node is shutting down.
  Status AdmitForkChild(const std::shared_ptr<Sandbox>& child);
  // Per-call runs (sandbox_manager_run.cc).
  Result<std::shared_ptr<Sandbox>> StartRunVm(const RunOptions& options, RunTimings* timings);
  Result<guest::client::ExecResult> ExecInRunVm(Sandbox& sb, const ExecOptions& exec);
  // Unmounts the run's workspace, stops its VM and releases the workspace.
  void ReleaseRunWorkspace(Sandbox& sb);
  // Hands the VM to teardowns_: its teardown is not the caller's to wait for.
  void DiscardRunVm(std::shared_ptr<Sandbox> sb);
  void CountRun(const char* result);
  void RegisterRunMetrics();
  void RegisterSuspendMetrics();
  // The workspace store, under the state directory.
  Status OpenWorkspaces();
  // The sandbox network's metrics (a census read at scrape time).
  void RegisterNetworkMetrics();
  Result<std::shared_ptr<Sandbox>> Find(const std::string& id);
  std::shared_ptr<guest::client::AgentClient> AgentOf(Sandbox& sb, Status* why);
  // Every agent connection's options: the node's caps on what guests return.
  guest::client::ClientOptions AgentOptions() const;
  std::string SandboxDir(const std::string& id) const;
  // Templates (sandbox_manager_templates.cc); the bake itself is baker_'s.
  void Bake(std::shared_ptr<Template> t);
  void SetTemplateProgress(const std::shared_ptr<Template>& t, const std::string& message);
  Status PersistTemplate(const Template& t);  // requires t's lock
  std::string TemplateDir(const std::string& name) const;
  void RegisterMetrics();
  void UpdatePoolGauge();

  NodeConfig config_;
  std::unique_ptr<metrics::Registry> own_metrics_;
  metrics::Registry* metrics_;
  metrics::Family<metrics::Histogram>* restore_seconds_ = nullptr;
  metrics::Family<metrics::Histogram>* fork_seconds_ = nullptr;
  metrics::Family<metrics::Histogram>* exec_seconds_ = nullptr;
  metrics::Family<metrics::Histogram>* bake_seconds_ = nullptr;
  metrics::Family<metrics::Gauge>* pool_vms_ = nullptr;
  metrics::Family<metrics::Counter>* vmm_crashes_ = nullptr;
  metrics::Family<metrics::Counter>* runs_total_ = nullptr;
  metrics::Family<metrics::Gauge>* runs_in_flight_ = nullptr;
  metrics::Family<metrics::Histogram>* run_restore_seconds_ = nullptr;
  metrics::Family<metrics::Histogram>* slot_build_seconds_ = nullptr;
  metrics::Family<metrics::Counter>* slot_build_failures_ = nullptr;
  metrics::Family<metrics::Counter>* orphans_swept_ = nullptr;
  metrics::Family<metrics::Histogram>* suspend_seconds_ = nullptr;
  metrics::Family<metrics::Histogram>* resume_seconds_ = nullptr;
  // Lets the scrape-time gauge callback outlive this manager safely.
  struct ScrapeLink {
    std::mutex mu;
    SandboxManager* manager = nullptr;
  };
  std::shared_ptr<ScrapeLink> scrape_link_;

  Cgroups cgroups_;
  std::unique_ptr<Capacity> capacity_;
  std::unique_ptr<SuspendDisk> suspend_disk_;
  std::unique_ptr<SandboxTable> table_;
  ProcessWatcher watcher_;
  // TTL, orphans and busy cgroups. Made before and destroyed after pool_,
  // whose discarded VMs' groups it removes.
  std::unique_ptr<Sweeper> sweeper_;
  std::unique_ptr<WarmPool> pool_;
  std::unique_ptr<TemplateBaker> baker_;
  std::unique_ptr<SandboxNetworks> networks_;  // its network() null: --sandbox-network off
  std::unique_ptr<SandboxWorkspaces> workspaces_;
  // Watches, stops and lets go of every sandbox's VMM; tears sandboxes down.
  std::unique_ptr<VmSupervisor> supervisor_;
  // Puts VMs under sandboxes: restores (create, run, resume) and forks.
  std::unique_ptr<SandboxStarter> starter_;
  std::unique_ptr<Suspender> suspender_;
  // Finished runs' VMs, torn down after their answer went out.
  TeardownQueue teardowns_;

  // Guards templates_ and shut_down_. A template's mu and table_'s lock
  // nest inside it; it is never held while taking a sandbox's mu.
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Template>> templates_;

  std::mutex bake_mu_;
  std::vector<std::thread> bakers_;
  bool shut_down_ = false;
};

}  // namespace kubicle::noderuntime
