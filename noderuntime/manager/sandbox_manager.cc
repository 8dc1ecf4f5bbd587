// SandboxManager: opening (the parts wired, templates loaded, sandboxes
// re-adopted) and shutting down, the per-sandbox calls (get, list, delete,
// tokens, exec, files) and the workspace store's calls, metrics. Creation
// and fork are in sandbox_manager_create.cc, per-call runs in
// sandbox_manager_run.cc, templates in sandbox_manager_templates.cc; the
// jobs themselves are the collaborators' (sandbox_manager.h).
#include "noderuntime/manager/sandbox_manager.h"

#include <signal.h>
#include <unistd.h>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "vmm/control_client.h"
#include "kube/label_selector.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;
using guest::client::AgentClient;

SandboxManager::SandboxManager(NodeConfig config, metrics::Registry* metrics)
    : config_(std::move(config)),
      metrics_(metrics),
      cgroups_(config_.cgroup_root, config_.use_cgroups, config_.cgroup_parent),
      capacity_(std::make_unique<Capacity>(config_.capacity_mem_mib, config_.capacity_vcpus)),
      suspend_disk_(std::make_unique<SuspendDisk>(
          (config_.capacity_suspend_disk_mib ? config_.capacity_suspend_disk_mib : config_.capacity_mem_mib)
          << 20)),
      table_(std::make_unique<SandboxTable>()) {
  if (metrics_ == nullptr) {
    own_metrics_ = std::make_unique<metrics::Registry>();
    metrics_ = own_metrics_.get();
  }
  if (!config_.clock) config_.clock = [] { return std::chrono::system_clock::now(); };
  Sweeper::Options so;
  so.target = this;
  so.launcher = config_.launcher.get();
  so.cgroups = &cgroups_;
  so.state_dir = config_.state_dir;
  so.clock = config_.clock;
  so.ttl_interval = config_.sweep_interval;
  so.orphan_interval = config_.orphan_sweep_interval;
  so.orphan_min_age = config_.orphan_min_age;
  sweeper_ = std::make_unique<Sweeper>(std::move(so));
}

vmm::LaunchSpec VmmBase(const NodeConfig& config) {
  vmm::LaunchSpec base;
  base.serial_limits = config.console;
  base.seccomp = config.vmm_seccomp;
  return base;
}

Result<std::unique_ptr<SandboxManager>> SandboxManager::Open(NodeConfig config,
                                                             metrics::Registry* metrics) {
  if (config.state_dir.empty() || config.state_dir[0] != '/')
    return Status::InvalidArgument("state_dir must be an absolute path");
  while (config.state_dir.size() > 1 && config.state_dir.back() == '/') config.state_dir.pop_back();
  // Unix socket paths are limited to 107 bytes: <state>/sock/<cid>.vsock must fit.
  if (config.state_dir.size() > 80)
    return Status::InvalidArgument("state_dir is too long for Unix socket paths (max 80 bytes)");
  if (!config.launcher) {
    ASSIGN_OR_RETURN(config.launcher, ProcessVmmLauncher::Create(config.vmm_binary));
  }
  if (config.capacity_mem_mib == 0 || config.capacity_vcpus == 0)
    return Status::InvalidArgument("capacity_mem_mib and capacity_vcpus must be positive");
  std::unique_ptr<SandboxManager> m(new SandboxManager(std::move(config), metrics));
  RETURN_IF_ERROR(m->Init());
  return m;
}

Status SandboxManager::Init() {
  for (const char* sub : {"sandboxes", "templates", "pool"})
    RETURN_IF_ERROR(MakeDirs(config_.state_dir + "/" + sub));
  // Every VM's control and vsock sockets live here: 0700 whatever the umask
  // (and each socket 0600 once its VMM has bound it).
  RETURN_IF_ERROR(MakePrivateDir(config_.state_dir + "/sock", 0700));
  RETURN_IF_ERROR(watcher_.Start());
  RegisterMetrics();
  RETURN_IF_ERROR(OpenParts());
  RETURN_IF_ERROR(LoadTemplates());
  RETURN_IF_ERROR(Readopt());
  // After adoption: what no running sandbox took back is swept.
  RETURN_IF_ERROR(networks_->Start());
  {
    std::lock_guard l(mu_);
    for (auto& [name, t] : templates_) {
      std::lock_guard tl(t->mu);
      if (t->info.state == TemplateState::kBaking) {
        std::lock_guard bl(bake_mu_);
        bakers_.emplace_back([this, t = t] { Bake(t); });
      } else if (t->info.state == TemplateState::kReady && !t->in_pool) {
        t->in_pool = true;
        pool_->Want({t->info.spec.mem_mib, t->info.spec.vcpus});
      }
    }
  }
  pool_->Start();
  sweeper_->Start();
  teardowns_.Start();
  log::Info("node runtime started", {{"state_dir", config_.state_dir},
                                     {"sandboxes", table_->size()},
                                     {"templates", templates_.size()},
                                     {"cgroups", !cgroups_.enabled() ? "off"
                                                 : cgroups_.v2()     ? "v2"
                                                                     : "v1"}});
  return Status::Ok();
}

// The pool, the baker and the collaborators, each given what it works on.
Status SandboxManager::OpenParts() {
  WarmPool::Options po;
  po.launcher = config_.launcher.get();
  po.dir = config_.state_dir + "/pool";
  po.sock_dir = config_.state_dir + "/sock";
  po.per_shape = config_.pool_size_per_shape;
  po.vmm_base = VmmBase(config_);
  po.reserve = [this](const VmShape& s) { return capacity_->TryReserve(s); };
  po.release = [this](const VmShape& s) { capacity_->Release(s); };
  po.on_change = [this] { UpdatePoolGauge(); };
  if (cgroups_.enabled()) {
    po.prepare = [this](const PoolVm& vm) {
      Status s = cgroups_.Create(vm.name, LimitsFor(vm.shape, config_.cgroup_overhead_mib));
      if (s.ok()) s = cgroups_.AddProcess(vm.name, vm.vmm->pid());
      if (!s.ok()) log::Warn("pool vm cgroup", {{"vm", vm.name}, {"error", s.ToString()}});
    };
    po.discard = [this](const PoolVm& vm) { sweeper_->RemoveCgroupSoon(vm.name); };
  }
  pool_ = std::make_unique<WarmPool>(std::move(po));
  TemplateBaker::Options bo;
  bo.launcher = config_.launcher.get();
  bo.sock_dir = config_.state_dir + "/sock";
  bo.vmm_base = VmmBase(config_);
  bo.boot_timeout = config_.bake_boot_timeout;
  bo.agent_options = AgentOptions();
  bo.allocate_cid = [this] { return table_->AllocateCid(); };
  bo.release_cid = [this](uint32_t cid) { table_->ReleaseCid(cid); };
  baker_ = std::make_unique<TemplateBaker>(std::move(bo));

  SandboxNetworks::Metrics nm{slot_build_seconds_, slot_build_failures_, orphans_swept_};
  ASSIGN_OR_RETURN(networks_, SandboxNetworks::Open(config_.network, config_.state_dir, nm));
  RETURN_IF_ERROR(OpenWorkspaces());
  VmSupervisor::Options vo;
  vo.watcher = &watcher_;
  vo.capacity = capacity_.get();
  vo.suspend_disk = suspend_disk_.get();
  vo.table = table_.get();
  vo.sweeper = sweeper_.get();
  vo.workspaces = workspaces_.get();
  vo.network = sandbox_network();
  vo.vmm_crashes = vmm_crashes_;
  vo.delete_grace = config_.delete_grace;
  supervisor_ = std::make_unique<VmSupervisor>(std::move(vo));
  SandboxStarter::Options st;
  st.state_dir = config_.state_dir;
  st.launcher = config_.launcher.get();
  st.pool = pool_.get();
  st.capacity = capacity_.get();
  st.capacity_mem_mib = config_.capacity_mem_mib;
  st.capacity_vcpus = config_.capacity_vcpus;
  st.teardowns = &teardowns_;
  st.cgroups = &cgroups_;
  st.cgroup_overhead_mib = config_.cgroup_overhead_mib;
  st.sweeper = sweeper_.get();
  st.supervisor = supervisor_.get();
  st.workspaces = workspaces_.get();
  st.networks = networks_.get();
  st.clock = config_.clock;
  st.agent_timeout = config_.agent_timeout;
  st.agent_options = AgentOptions();
  st.admit = [this](const std::shared_ptr<Sandbox>& k) { return AdmitForkChild(k); };
  st.restore_seconds = restore_seconds_;
  starter_ = std::make_unique<SandboxStarter>(std::move(st));
  Suspender::Options so;
  so.supervisor = supervisor_.get();
  so.suspend_disk = suspend_disk_.get();
  so.table = table_.get();
  so.clock = config_.clock;
  so.starter = starter_.get();
  so.networks = networks_.get();
  so.suspend_seconds = suspend_seconds_;
  so.resume_seconds = resume_seconds_;
  suspender_ = std::make_unique<Suspender>(std::move(so));
  return Status::Ok();
}

// What the state directory holds of sandboxes: the Adopter's, once.
Status SandboxManager::Readopt() {
  Adopter::Options ao;
  ao.state_dir = config_.state_dir;
  ao.launcher = config_.launcher.get();
  ao.table = table_.get();
  ao.capacity = capacity_.get();
  ao.cgroups = &cgroups_;
  ao.sweeper = sweeper_.get();
  ao.supervisor = supervisor_.get();
  ao.suspender = suspender_.get();
  ao.workspaces = workspaces_.get();
  ao.networks = networks_.get();
  ao.agent_options = AgentOptions();
  ao.vmm_crashes = vmm_crashes_;
  Adopter adopter(std::move(ao));
  RETURN_IF_ERROR(adopter.AdoptSandboxes());
  adopter.KillOrphans();
  return Status::Ok();
}

SandboxManager::~SandboxManager() { Shutdown(false); }

void SandboxManager::Shutdown(bool stop_vms) {
  {
    std::lock_guard l(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (baker_) baker_->Stop();
  sweeper_->Stop();
  {
    std::lock_guard l(bake_mu_);
    for (std::thread& t : bakers_)
      if (t.joinable()) t.join();
    bakers_.clear();
  }
  if (pool_) pool_->Stop();
  teardowns_.Stop();  // finished runs' VMs go now
  const std::vector<std::shared_ptr<Sandbox>> all = table_->All();
  for (auto& sb : all) {
    std::lock_guard op(sb->op_mu);  // waits for creates and deletes in flight
    if (stop_vms || sb->ephemeral) {  // a run in flight fails: its VM must not outlive it
      Status s = supervisor_->Teardown(sb);
      if (!s.ok()) log::Warn("teardown at shutdown", {{"sandbox", sb->rec.info.id}, {"error", s.ToString()}});
      continue;
    }
    supervisor_->Unwatch(*sb);
    std::lock_guard l(sb->mu);
    sb->agent.reset();
    sb->vmm.reset();
  }
  sweeper_->RetryCgroupRemovals(100);
  // Slots of sandboxes left running stay; the pool's and released ones go,
  // and the host's table with the last slot in use: a stop that leaves no VM
  // (an uninstall's, after its hook) leaves no table either, one that keeps
  // VMs keeps it for them and the next node.
  if (network::SandboxNetwork* n = sandbox_network()) n->Stop(/*remove_host_table=*/true);
  if (stop_vms) {
    // Nothing of this node is left to hold its cgroup parent.
    Status s = cgroups_.RemoveParent();
    if (!s.ok()) log::Warn("cgroup parent removal failed", {{"error", s.ToString()}});
  } else {
    // The groups are in the host's hierarchy, which outlives a node pod: a
    // stop that leaves no VM (an uninstall's, after its hook) takes them
    // along. VMs left running keep them busy, and one try each leaves them
    // for the next node (docs/node.md, "VMMs across node restarts and
    // rollouts").
    (void)cgroups_.RemoveParent(1);
  }
  {
    std::lock_guard l(scrape_link_->mu);
    scrape_link_->manager = nullptr;
  }
  log::Info("node runtime stopped", {{"stop_vms", stop_vms ? "true" : "false"}});
}

std::string SandboxManager::SandboxDir(const std::string& id) const {
  return config_.state_dir + "/sandboxes/" + id;
}

// ---- workspaces (docs/workspaces.md): the store's; a sandbox's attachment
// is SandboxWorkspaces' ----

Status SandboxManager::OpenWorkspaces() {
  WorkspaceStoreOptions o;
  o.dir = config_.state_dir + "/workspaces";
  o.budget_mib = config_.workspace_budget_mib;
  o.mke2fs = config_.mke2fs;
  o.clock = config_.clock;
  o.helper.helper = config_.ext4_helper;
  if (o.helper.helper.empty()) {
    const std::string& vmm = config_.vmm_binary;
    const size_t slash = vmm.rfind('/');
    o.helper.helper =
        (slash == std::string::npos ? std::string(".") : vmm.substr(0, slash)) + "/kubicle-ext4";
  }
  ASSIGN_OR_RETURN(std::unique_ptr<WorkspaceStore> store, WorkspaceStore::Open(std::move(o)));
  workspaces_ = std::make_unique<SandboxWorkspaces>(std::move(store));
  return Status::Ok();
}

Result<WorkspaceInfo> SandboxManager::PutWorkspace(const WorkspaceSpec& spec) {
  return workspaces_->store().Put(spec);
}
Result<WorkspaceInfo> SandboxManager::GetWorkspace(const std::string& name) {
  return workspaces_->store().Get(name);
}
std::vector<WorkspaceInfo> SandboxManager::ListWorkspaces() { return workspaces_->store().List(); }
Status SandboxManager::DeleteWorkspace(const std::string& name) {
  return workspaces_->store().Delete(name);
}
bool SandboxManager::CheckWorkspaceToken(const std::string& name, const std::string& token) {
  return workspaces_->store().CheckToken(name, token);
}
Status SandboxManager::ReadWorkspaceFile(const std::string& name, const std::string& path,
                                         const guest::client::FileChunkFn& on_chunk) {
  return workspaces_->store().ReadFile(name, path, on_chunk);
}
Status SandboxManager::WriteWorkspaceFile(const std::string& name, const std::string& path,
                                          guest::protocol::ByteSpan data, uint32_t mode) {
  return workspaces_->store().WriteFile(name, path, data, mode);
}
Result<guest::protocol::StatReply> SandboxManager::StatWorkspaceFile(const std::string& name,
                                                                     const std::string& path) {
  return workspaces_->store().StatFile(name, path);
}
Result<std::vector<guest::protocol::DirEntry>> SandboxManager::ListWorkspaceFiles(
    const std::string& name, const std::string& path) {
  return workspaces_->store().ListFiles(name, path);
}
Status SandboxManager::RemoveWorkspaceFile(const std::string& name, const std::string& path,
                                           bool recursive) {
  return workspaces_->store().RemoveFile(name, path, recursive);
}

Result<SandboxInfo> SandboxManager::SuspendSandbox(const std::string& id) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  return suspender_->Suspend(sb);
}

Result<SandboxInfo> SandboxManager::ResumeSandbox(const std::string& id) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  return suspender_->Resume(sb);
}

Result<std::shared_ptr<SandboxManager::Sandbox>> SandboxManager::Find(const std::string& id) {
  RETURN_IF_ERROR(ValidateId(id, "sandbox id"));
  {
    std::lock_guard l(mu_);
    if (shut_down_) return Status::Unavailable("the node runtime is shutting down");
  }
  auto sb = table_->Find(id);
  if (!sb || sb->ephemeral) return Status::NotFound("no sandbox '" + id + "'");
  return sb;
}

Result<SandboxInfo> SandboxManager::GetSandbox(const std::string& id) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  std::lock_guard l(sb->mu);
  return sb->rec.info;
}

Result<std::vector<SandboxInfo>> SandboxManager::ListSandboxes(const std::string& selector) {
  auto sel = kube::LabelSelector::Parse(selector);
  if (!sel.ok()) return Status::InvalidArgument("bad label selector: " + sel.status().message());
  const std::vector<std::shared_ptr<Sandbox>> all = table_->All();
  std::vector<SandboxInfo> out;
  for (auto& sb : all) {
    std::lock_guard l(sb->mu);
    if (!sb->removed && !sb->ephemeral && sel->Matches(sb->rec.info.labels)) out.push_back(sb->rec.info);
  }
  return out;
}

Status SandboxManager::DeleteSandbox(const std::string& id) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  {
    // A create in flight holds op_mu: killing its VM makes it fail fast.
    std::lock_guard l(sb->mu);
    sb->delete_requested = true;
    if (sb->rec.info.state == SandboxState::kCreating && sb->vmm)
      (void)sb->vmm->Signal(SIGKILL);
  }
  std::lock_guard op(sb->op_mu);
  Status s = supervisor_->Teardown(sb);
  log::Info("sandbox deleted", {{"sandbox", id}, {"template", sb->rec.info.template_name}});
  return s;
}

Result<std::vector<std::string>> SandboxManager::DeleteSandboxes(const std::string& selector) {
  ASSIGN_OR_RETURN(std::vector<SandboxInfo> matched, ListSandboxes(selector));
  std::vector<std::string> ids;
  for (const SandboxInfo& info : matched) {
    Status s = DeleteSandbox(info.id);
    if (s.ok()) ids.push_back(info.id);
    else if (s.code() != StatusCode::kNotFound) return s;
  }
  return ids;
}

bool SandboxManager::CheckToken(const std::string& id, const std::string& token) {
  auto sb = Find(id);
  if (!sb.ok()) return false;
  std::string want;
  {
    std::lock_guard l((*sb)->mu);
    want = (*sb)->rec.token_sha256;
  }
  return !want.empty() && ConstantTimeEqual(Sha256Hex(token), want);
}

Status SandboxManager::SetSandboxToken(const std::string& id, const std::string& token_sha256) {
  bool hex = token_sha256.size() == 64;
  for (char c : token_sha256) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) return Status::InvalidArgument("token_sha256 is not 64 lowercase hex digits");
  ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, Find(id));
  std::lock_guard l(sb->mu);
  if (sb->rec.token_sha256 == token_sha256) return Status::Ok();
  if (!sb->rec.token_sha256.empty())
    return Status::FailedPrecondition("sandbox '" + id + "' already has another token");
  sb->rec.token_sha256 = token_sha256;
  // A sandbox still being created is persisted with it when it is done.
  if (sb->rec.info.state == SandboxState::kCreating) return Status::Ok();
  Status st = supervisor_->Persist(*sb);
  if (!st.ok()) sb->rec.token_sha256.clear();  // memory and disk agree: the caller retries
  return st;
}

guest::client::ClientOptions SandboxManager::AgentOptions() const {
  guest::client::ClientOptions o;
  o.limits = config_.agent_limits;
  return o;
}

std::shared_ptr<AgentClient> SandboxManager::AgentOf(Sandbox& sb, Status* why) {
  std::lock_guard l(sb.mu);
  if (sb.rec.info.state == SandboxState::kSuspended) {
    *why = Status::FailedPrecondition("sandbox '" + sb.rec.info.id + "' is Suspended: resume it first");
    return nullptr;
  }
  if (sb.rec.info.state != SandboxState::kRunning || !sb.agent) {
    *why = Status::FailedPrecondition("sandbox '" + sb.rec.info.id + "' is " +
                                      SandboxStateName(sb.rec.info.state) +
                                      (sb.rec.info.message.empty() ? "" : ": " + sb.rec.info.message));
    return nullptr;
  }
  return sb.agent;
}

Result<guest::client::ExecResult> SandboxManager::Exec(const std::string& id, const ExecOptions& options) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  Status why;
  auto agent = AgentOf(*sb, &why);
  if (!agent) return why;
  guest::protocol::ExecStartRequest request = options.request;
  {
    std::lock_guard l(sb->mu);
    request.env = MergedEnv(sb->rec.info.env, options.request.env);
  }
  auto t0 = std::chrono::steady_clock::now();
  const guest::client::Deadline deadline = BoundExec(&request, options.timeout);
  auto r = agent->Exec(request, options.io, deadline);
  if (r.ok()) exec_seconds_->WithLabels({}).Observe(SecondsSince(t0));
  return r;
}

Status SandboxManager::WriteFile(const std::string& id, const std::string& path,
                                 guest::protocol::ByteSpan data, uint32_t mode) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  Status why;
  auto agent = AgentOf(*sb, &why);
  if (!agent) return why;
  guest::client::WriteOptions wo;
  wo.mode = mode;
  return agent->WriteFile(path, data, wo);
}

Result<guest::protocol::Bytes> SandboxManager::ReadFile(const std::string& id, const std::string& path) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  Status why;
  auto agent = AgentOf(*sb, &why);
  if (!agent) return why;
  return agent->ReadFile(path);
}

Status SandboxManager::ReadFileStream(const std::string& id, const std::string& path,
                                      const guest::client::FileChunkFn& on_chunk) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  Status why;
  auto agent = AgentOf(*sb, &why);
  if (!agent) return why;
  return agent->ReadFileStream(path, on_chunk,
                               guest::client::DeadlineIn(config_.file_stream_timeout));
}

std::set<pid_t> SandboxManager::OwnedVmms() {
  std::set<pid_t> owned;
  const std::vector<std::shared_ptr<Sandbox>> all = table_->All();
  for (pid_t p : baker_->pids()) owned.insert(p);
  for (auto& sb : all) {
    std::lock_guard l(sb->mu);
    if (sb->rec.info.vmm_pid > 0) owned.insert(sb->rec.info.vmm_pid);
  }
  for (pid_t p : pool_->idle_pids()) owned.insert(p);
  return owned;
}

std::vector<std::string> SandboxManager::ExpiredSandboxes(WallTime now) {
  std::vector<std::string> expired;
  for (auto& sb : table_->All()) {
    std::lock_guard sl(sb->mu);
    if (sb->rec.info.expires_at && *sb->rec.info.expires_at <= now &&
        sb->rec.info.state != SandboxState::kCreating && !sb->removed)
      expired.push_back(sb->rec.info.id);
  }
  return expired;
}

SandboxManager::Usage SandboxManager::usage() const {
  Usage u;
  auto [mem, vcpus] = capacity_->used();
  u.mem_mib = mem;
  u.vcpus = vcpus;
  u.pool_vms = pool_ ? pool_->idle() : 0;
  u.watched_processes = watcher_.size();
  u.pending_cgroups = sweeper_->pending_cgroups();
  u.suspended_bytes = suspend_disk_->used();
  u.suspend_disk_bytes = suspend_disk_->total();
  if (network::SandboxNetwork* n = networks_ ? networks_->network() : nullptr)
    u.network = n->census();
  return u;
}

void SandboxManager::UpdatePoolGauge() {
  if (pool_vms_ && pool_) pool_vms_->WithLabels({}).Set(static_cast<double>(pool_->idle()));
}

void SandboxManager::RegisterMetrics() {
  auto lat = metrics::ExponentialBuckets(0.001, 2, 16);
  restore_seconds_ = &metrics_->AddHistogram("kubicle_restore_seconds",
                                             "Sandbox create: pool restore to agent answering", {}, lat);
  fork_seconds_ = &metrics_->AddHistogram("kubicle_fork_seconds",
                                          "Sandbox fork: request to every child answering", {}, lat);
  exec_seconds_ = &metrics_->AddHistogram("kubicle_exec_seconds", "Exec round trip through the agent", {}, lat);
  bake_seconds_ = &metrics_->AddHistogram("kubicle_template_bake_seconds", "Template bake duration", {},
                                          metrics::ExponentialBuckets(0.1, 2, 14));
  pool_vms_ = &metrics_->AddGauge("kubicle_pool_vms", "Idle warm-pool VMs");
  vmm_crashes_ = &metrics_->AddCounter("kubicle_vmm_crashes_total", "VMM processes that exited unexpectedly");
  vmm_crashes_->WithLabels({});
  RegisterRunMetrics();
  scrape_link_ = std::make_shared<ScrapeLink>();
  scrape_link_->manager = this;
  RegisterNetworkMetrics();  // its gauges read through scrape_link_
  metrics_->AddGaugeCallback(
      "kubicle_sandboxes", "Sandboxes by state", {"state"}, [link = scrape_link_] {
        std::vector<std::pair<metrics::LabelValues, double>> out;
        std::lock_guard l(link->mu);
        if (link->manager == nullptr) return out;
        std::map<std::string, double> counts;
        for (SandboxState s : {SandboxState::kCreating, SandboxState::kRunning, SandboxState::kFailed,
                               SandboxState::kDeleting, SandboxState::kSuspended})
          counts[SandboxStateName(s)] = 0;
        auto all = link->manager->ListSandboxes("");
        if (all.ok())
          for (const SandboxInfo& i : *all) counts[SandboxStateName(i.state)] += 1;
        for (auto& [state, n] : counts) out.push_back({{state}, n});
        return out;
      });
  RegisterSuspendMetrics();  // its gauge reads through scrape_link_
}

void SandboxManager::RegisterSuspendMetrics() {
  auto lat = metrics::ExponentialBuckets(0.001, 2, 16);
  suspend_seconds_ = &metrics_->AddHistogram(
      "kubicle_suspend_seconds", "Sandbox suspend: request to snapshot durable and VM stopped", {},
      lat);
  resume_seconds_ = &metrics_->AddHistogram("kubicle_resume_seconds",
                                            "Sandbox resume: request to agent answering", {}, lat);
  // Read at scrape time, as the sandbox counts are.
  metrics_->AddGaugeCallback(
      "kubicle_suspended_bytes", "Node disk held by suspended sandboxes' snapshots", {},
      [link = scrape_link_] {
        std::vector<std::pair<metrics::LabelValues, double>> out;
        std::lock_guard l(link->mu);
        if (link->manager != nullptr)
          out.push_back({{}, static_cast<double>(link->manager->usage().suspended_bytes)});
        return out;
      });
}

void SandboxManager::RegisterNetworkMetrics() {
  slot_build_seconds_ = &metrics_->AddHistogram(
      "kubicle_sandbox_network_slot_build_seconds",
      "Sandbox network: one namespace built (netns, veth, TAP, nftables), for the pool or a create",
      {}, metrics::ExponentialBuckets(0.001, 2, 14));
  slot_build_failures_ = &metrics_->AddCounter("kubicle_sandbox_network_slot_build_failures_total",
                                               "Sandbox network: namespace builds that failed");
  slot_build_failures_->WithLabels({});
  // Scrape-time views of the slots' census; all zero with the network off.
  auto census = [link = scrape_link_]() -> std::optional<network::SandboxNetwork::Census> {
    std::lock_guard l(link->mu);
    if (link->manager == nullptr || link->manager->sandbox_network() == nullptr)
      return std::nullopt;
    return link->manager->sandbox_network()->census();
  };
  metrics_->AddGaugeCallback("kubicle_sandbox_network_slots",
                             "Sandbox network: namespaces by state (free: the CIDR's unused /30s)",
                             {"state"}, [census] {
                               const auto c = census().value_or(network::SandboxNetwork::Census{});
                               return std::vector<std::pair<metrics::LabelValues, double>>{
                                   {{"in_use"}, double(c.in_use)},
                                   {{"pooled"}, double(c.pooled)},
                                   {{"building"}, double(c.building)},
                                   {{"releasing"}, double(c.releasing)},
                                   {{"free"}, double(c.free)}};
                             });
  orphans_swept_ =
      &metrics_->AddCounter("kubicle_sandbox_network_orphans_swept_total",
                            "Sandbox network: namespaces and host veths no slot held, torn down");
  orphans_swept_->WithLabels({});
}

}  // namespace kubicle::noderuntime
