// SandboxManager: opening and shutting down, supervision (VMM exits),
// teardown, and the per-sandbox calls (get, list, delete, exec, files).
// Creation and fork are in sandbox_manager_create.cc, re-adoption in
// sandbox_manager_adopt.cc, templates in sandbox_manager_templates.cc (the
// bake itself: TemplateBaker, template_baker.h); the periodic sweeps (TTL,
// orphans, busy cgroups) are the Sweeper's (sandbox_sweeper.h).
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
      Status s = cgroups_.Create(vm.name, LimitsFor(vm.shape));
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

  RETURN_IF_ERROR(OpenNetwork());
  RETURN_IF_ERROR(OpenWorkspaces());
  RETURN_IF_ERROR(LoadTemplates());
  RETURN_IF_ERROR(AdoptSandboxes());
  KillOrphans();
  // After adoption: what no running sandbox took back is swept.
  RETURN_IF_ERROR(StartNetwork());
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
                                     {"cgroups", !cgroups_.enabled() ? "off" : cgroups_.v2() ? "v2" : "v1"}});
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
      Status s = Teardown(sb);
      if (!s.ok()) log::Warn("teardown at shutdown", {{"sandbox", sb->rec.info.id}, {"error", s.ToString()}});
      continue;
    }
    uint64_t key;
    {
      std::lock_guard l(sb->mu);
      key = std::exchange(sb->watch_key, 0);
    }
    if (key) watcher_.Unwatch(key);
    std::lock_guard l(sb->mu);
    sb->agent.reset();
    sb->vmm.reset();
  }
  sweeper_->RetryCgroupRemovals(100);
  // Slots of sandboxes left running stay; the pool's and released ones go,
  // and the host's table with the last slot in use: a stop that leaves no VM
  // (an uninstall's, after its hook) leaves no table either, one that keeps
  // VMs keeps it for them and the next node.
  if (network_) network_->Stop(/*remove_host_table=*/true);
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

std::string SandboxManager::SockPath(uint32_t cid, const char* kind) const {
  return config_.state_dir + "/sock/" + std::to_string(cid) + "." + kind;
}

Status SandboxManager::Persist(Sandbox& sb) {
  // A run's VM has no record on purpose: after a daemon crash it is an
  // orphan that Open() kills, never a sandbox to re-adopt.
  if (sb.ephemeral) return Status::Ok();
  return AtomicWriteFile(sb.dir + "/record.json", EncodeSandboxRecord(sb.rec));
}

Status SandboxManager::Watch(const std::shared_ptr<Sandbox>& sb) {
  std::weak_ptr<Sandbox> weak = sb;
  std::lock_guard l(sb->mu);
  if (!sb->vmm) return Status::FailedPrecondition("no process to watch");
  ASSIGN_OR_RETURN(sb->watch_key, watcher_.Watch(sb->vmm->exit_fd(), [this, weak](std::optional<int> code) {
                     if (auto s = weak.lock()) OnVmmExit(s, code);
                   }));
  return Status::Ok();
}

void SandboxManager::OnVmmExit(const std::shared_ptr<Sandbox>& sb, std::optional<int> code) {
  std::lock_guard l(sb->mu);
  // The watcher reaps our own children; a VMM it could not reap may still
  // tell its code through the launcher (a fake one does).
  if (!code && sb->vmm) code = sb->vmm->Reap();
  sb->exited = true;
  sb->watch_key = 0;
  sb->cv.notify_all();
  if (sb->rec.info.state != SandboxState::kRunning || sb->delete_requested) return;
  std::string reason = code ? "kubicle-vmm " + DescribeExit(*code) : "kubicle-vmm exited unexpectedly";
  std::string tail = TailOfFile(sb->log_path, 400);
  if (!tail.empty()) reason += "; vmm.log: " + tail;
  sb->rec.info.state = SandboxState::kFailed;
  sb->rec.info.message = reason;
  sb->agent.reset();
  FreeResources(*sb);
  Status s = Persist(*sb);
  vmm_crashes_->WithLabels({}).Inc();
  log::Error("sandbox failed", {{"sandbox", sb->rec.info.id},
                                {"run", sb->rec.info.labels.count("kubicle.dev/run") ? sb->rec.info.labels.at("kubicle.dev/run") : ""},
                                {"template", sb->rec.info.template_name},
                                {"reason", reason},
                                {"persist", s.ok() ? "ok" : s.ToString()}});
}

void SandboxManager::FreeResources(Sandbox& sb) {
  if (sb.holds_capacity) capacity_->Release(sb.shape);
  sb.holds_capacity = false;
  if (sb.holds_cid) table_->ReleaseCid(sb.rec.info.cid);
  sb.holds_cid = false;
  if (sb.holds_cgroup) sweeper_->RemoveCgroupSoon(sb.rec.info.id);
  sb.holds_cgroup = false;
  // The VMM is gone (or going): its TAP's namespace is torn down off this path.
  if (sb.holds_slot && network_ && sb.rec.info.network) network_->Release(sb.rec.info.network->slot);
  sb.holds_slot = false;
  if (sb.holds_suspend_disk) suspend_disk_->Release(sb.rec.info.suspended_bytes);
  sb.holds_suspend_disk = false;
  ReleaseWorkspace(sb);
  if (!sb.rec.control_path.empty()) ::unlink(sb.rec.control_path.c_str());
  if (!sb.rec.vsock_path.empty()) ::unlink(sb.rec.vsock_path.c_str());
  sb.vmm.reset();
}

void SandboxManager::StopVm(Sandbox& sb) {
  VmmProcess* vmm;
  std::string control;
  {
    std::lock_guard l(sb.mu);
    if (sb.exited || !sb.vmm) return;
    vmm = sb.vmm.get();  // stays: only Teardown/FreeResources let it go
    control = sb.rec.control_path;
  }
  if (sb.ephemeral) {  // nothing in a discarded VM is worth a clean shutdown
    (void)vmm->Signal(SIGKILL);
    WaitExited(vmm->exit_fd(), 10s);
    return;
  }
  Status r = vmm::control::ControlClient(control).Shutdown(500ms);
  if (!r.ok() || !WaitExited(vmm->exit_fd(), config_.delete_grace)) {
    (void)vmm->Signal(SIGKILL);
    WaitExited(vmm->exit_fd(), 10s);
  }
}

Status SandboxManager::Teardown(const std::shared_ptr<Sandbox>& sb) {
  UnmountWorkspace(*sb);  // while its agent still answers: a clean file system
  {
    std::lock_guard l(sb->mu);
    if (sb->removed) return Status::Ok();
    sb->delete_requested = true;
    sb->agent.reset();
    if (sb->rec.info.state != SandboxState::kFailed) sb->rec.info.state = SandboxState::kDeleting;
    // Without its record the VMM is an orphan to the next Open(), which
    // finishes this delete if the daemon dies before we do.
    if (!sb->dir.empty()) ::unlink((sb->dir + "/record.json").c_str());
  }
  StopVm(*sb);
  uint64_t key;
  {
    std::lock_guard l(sb->mu);
    key = std::exchange(sb->watch_key, 0);
  }
  if (key) watcher_.Unwatch(key);  // the callback is not running after this
  {
    std::lock_guard l(sb->mu);
    if (sb->vmm) sb->vmm->Reap();
    sb->exited = true;
    FreeResources(*sb);
    if (!sb->dir.empty()) {
      Status s = RemoveTree(sb->dir);
      if (!s.ok()) log::Warn("sandbox dir removal failed", {{"sandbox", sb->rec.info.id}, {"error", s.ToString()}});
    }
    sb->removed = true;
  }
  table_->Remove(sb);
  return Status::Ok();
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
  Status s = Teardown(sb);
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
  Status st = Persist(*sb);
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
  if (network_) u.network = network_->census();
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

}  // namespace kubicle::noderuntime
