#include "noderuntime/nodeagent/sandbox_sync.h"

#include <set>

#include "common/log.h"
#include "common/sha256.h"
#include "guest/protocol/messages.h"
#include "kube/api/names.h"
#include "kube/time_format.h"
#include "noderuntime/nodeagent/node_names.h"
#include "noderuntime/nodeagent/object_fields.h"

namespace kubicle::noderuntime::nodeagent {

using namespace std::chrono_literals;

namespace {

constexpr auto kWaitTemplate = 200ms;
constexpr auto kWaitSource = 250ms;
constexpr auto kWaitBusy = 200ms;
constexpr int kStartAttempts = 3;
constexpr auto kWaitWorkspace = 1s;

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The Sandbox's token hash: the operator's (status.tokenSha256) or, before
// that write, its client's own (spec.tokenSha256, immutable), which the
// operator publishes as written once it is 64 lowercase hex. Taken from
// the spec, the VM opens without waiting on the operator's status write,
// and a fork's children are all known at once. One that is not 64
// lowercase hex is never taken (the operator fails that Sandbox).
std::string TokenSha256Of(const kube::api::SandboxSpec& spec,
                          const kube::api::SandboxStatus& status) {
  if (!status.token_sha256.empty()) return status.token_sha256;
  if (spec.token_sha256 && IsSha256Hex(*spec.token_sha256)) return *spec.token_sha256;
  return "";
}

}  // namespace

std::optional<VmReport> ReportedVm(const kube::api::SandboxStatus& status) {
  if (!status.has_vm) return std::nullopt;
  return status.vm;
}

Result<DesiredVm> DesiredVmOf(const SandboxView& sandbox) {
  DesiredVm d;
  const std::string& uid = sandbox.meta.uid;
  if (uid.empty()) return Status::InvalidArgument("Sandbox has no metadata.uid");
  d.spec.id = SandboxNodeId(uid);
  d.spec.labels = sandbox.meta.labels;
  d.spec.labels[kLabelSandboxUid] = uid;
  d.spec.labels[kLabelNamespace] = sandbox.meta.ns;
  const std::string& name = sandbox.meta.name;
  // A name that is a valid hostname is the guest's; dotted 253-character
  // names are not, so those get the id.
  d.spec.hostname = guest::protocol::ValidateHostname(name).ok() && name.find('.') == std::string::npos
                        ? name : d.spec.id;
  d.spec.token_sha256 = TokenSha256Of(sandbox.spec, sandbox.status);
  for (const auto& [k, v] : sandbox.spec.env) d.spec.env[k] = v;
  // Checked strictly here too (the CRD keeps egress free-form): a bad
  // policy fails the Sandbox with the reason instead of running wider.
  // None given: its template's.
  if (const Json& net = sandbox.spec.network; !net.is_null()) {
    auto network = network::ParseNetworkSpec(net);
    if (!network.ok()) return Status::InvalidArgument("spec." + network.status().message());
    d.spec.network = *network;
  }
  d.template_name = sandbox.spec.template_name;
  d.fork_source = sandbox.spec.fork_source.value_or("");
  d.workspace_ref = sandbox.spec.workspace.value_or("");
  const int64_t mem = sandbox.spec.memory_mib.value_or(0);
  const int64_t vcpus = sandbox.spec.vcpus.value_or(0);
  if (mem > 0 || vcpus > 0) d.shape = ShapeOverride{static_cast<uint64_t>(mem), static_cast<uint32_t>(vcpus)};
  return d;
}

SandboxSync::SandboxSync(kube::KubeClient* client, SandboxService* service, TemplateSync* templates,
                         const AgentConfig& config, metrics::Registry* registry)
    : client_(client),
      service_(service),
      templates_(templates),
      config_(config),
      informer_(client, kube::SandboxResource(), "", kube::api::NodeSelector(config.node_name)),
      engine_({.workers = config.sandbox_workers, .resync = std::chrono::milliseconds(config.resync),
               .registry = registry, .metrics_prefix = "kubicle_node_agent_sandbox"}) {
  const std::vector<double> lat = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
  watch_lag_seconds_ = &registry->AddHistogram(
      "kubicle_node_agent_watch_lag_seconds",
      "Time from a Sandbox's creationTimestamp (second precision) to the node agent seeing it", {},
      {0.1, 0.25, 0.5, 1, 2, 5, 10, 30});
  status_write_seconds_ = &registry->AddHistogram(
      "kubicle_node_agent_sandbox_status_write_seconds", "Latency of the node agent's Sandbox status.vm writes",
      {}, lat);
  start_seconds_ = &registry->AddHistogram(
      "kubicle_node_agent_start_seconds",
      "From the node agent seeing a Sandbox to its status.vm Running written (restore or fork included)",
      {"how"}, lat);
  informer_.AddHandler([this](kube::WatchEventType t, const Json& obj) { OnEvent(t, obj); });
  engine_.Watch(&informer_, /*resync=*/true);
  engine_.OnResync([this] { MaybeReap(); });
}

SandboxSync::~SandboxSync() { Stop(); }

void SandboxSync::OnEvent(kube::WatchEventType type, const Json& obj) {
  const std::string key = kube::KeyOf(obj);
  if (type == kube::WatchEventType::kAdded && !kube::api::ParseSandboxStatus(obj).has_vm) {
    {
      std::lock_guard l(mu_);
      first_seen_.emplace(key, std::chrono::steady_clock::now());
    }
    auto created = kube::ParseTime(kube::api::ParseObjectMeta(obj).creation_timestamp);
    if (created.ok()) {
      watch_lag_seconds_->WithLabels({}).Observe(
          std::max(0.0, std::chrono::duration<double>(std::chrono::system_clock::now() - *created).count()));
    }
  }
  queue_.Add(key);
}

void SandboxSync::Start() {
  next_reap_ = std::chrono::steady_clock::now();
  (void)engine_.Start([this](const std::string& key) { Sync(key); });
}

void SandboxSync::Stop() { engine_.Stop(); }

void SandboxSync::MaybeReap() {
  if (std::chrono::steady_clock::now() < next_reap_) return;
  auto reaped = ReapOrphans();
  if (reaped.ok()) next_reap_ = std::chrono::steady_clock::now() + config_.reap_interval;
}

void SandboxSync::Sync(const std::string& key) {
  auto got = informer_.Get(key);
  if (!got) return SyncGone(key);
  const SandboxView obj = SandboxView::Parse(std::move(*got));
  if (obj.meta.uid.empty()) return;
  const std::string id = SandboxNodeId(obj.meta.uid);
  {
    std::lock_guard l(mu_);
    ids_[key] = id;
  }
  if (obj.meta.deleting) return Teardown(key, obj, id);
  auto vm = service_->GetSandbox(id);
  if (vm.ok()) {
    const bool suspend = obj.spec.suspend;
    switch (vm->state) {
      case SandboxState::kRunning:
        if (!TokenKnown(key, obj, id)) return;
        if (suspend) return Suspend(key, obj, id);
        return ReportStarted(key, obj, *vm);
      case SandboxState::kSuspended:
        if (!suspend) return Resume(key, obj, id);
        return Report(key, obj, SuspendedReport(""));
      case SandboxState::kFailed: return Report(key, obj, {"Failed", "", Bounded(vm->message), 0});
      default: return queue_.AddAfter(key, kWaitBusy);  // another pass is creating or deleting it
    }
  }
  auto reported = ReportedVm(obj.status);
  const std::string was = reported ? reported->state : "";
  if (was == "Running" || was == "Suspended") {
    return Report(key, obj, {"Failed", "", "the VM is gone: kubicle-node on " + config_.node_name +
                                               " has no VM for this Sandbox (it exited, or the node lost its state)", 0});
  }
  if (was == "Failed" || was == "Terminated") return;
  StartVm(key, obj, id);  // not started, or a start cut short by a node restart
}

void SandboxSync::SyncGone(const std::string& key) {
  std::string id;
  {
    std::lock_guard l(mu_);
    auto it = ids_.find(key);
    if (it == ids_.end()) return;
    id = it->second;
  }
  Status st = service_->DeleteSandbox(id);
  if (!st.ok() && st.code() != StatusCode::kNotFound) {
    queue_.AddRateLimited(key);
    return;
  }
  if (st.ok()) log::Info("VM deleted: its Sandbox is gone", {{"sandbox", key}, {"vm", id}});
  std::lock_guard l(mu_);
  ids_.erase(key);
  written_.erase(key);
  first_seen_.erase(key);
  queue_.Forget(key);
}

void SandboxSync::Teardown(const std::string& key, const SandboxView& obj, const std::string& id) {
  auto reported = ReportedVm(obj.status);
  Status st = service_->DeleteSandbox(id);
  if (!st.ok() && st.code() != StatusCode::kNotFound) {
    log::Warn("VM teardown failed; retrying", {{"sandbox", key}, {"vm", id}, {"error", st.ToString()}});
    return queue_.AddRateLimited(key);
  }
  if (st.ok()) log::Info("VM torn down", {{"sandbox", key}, {"vm", id}});
  if (!reported || reported->state != "Terminated") Report(key, obj, {"Terminated", "", "", 0});
}

bool SandboxSync::TokenKnown(const std::string& key, const SandboxView& obj, const std::string& id) {
  const std::string sha = TokenSha256Of(obj.spec, obj.status);
  if (sha.empty()) return false;  // the operator's status write requeues
  Status st = service_->SetSandboxToken(id, sha);
  if (st.ok()) return true;
  if (st.code() == StatusCode::kFailedPrecondition) {
    // A token never changes: the VM keeps the one it was opened with.
    log::Warn("status.tokenSha256 changed; the VM keeps its token", {{"sandbox", key}, {"vm", id}});
    return true;
  }
  Report(key, obj, {"Failed", "", Bounded("the node cannot take the token hash: " + st.message()), 0});
  return false;
}

void SandboxSync::ReportStarted(const std::string& key, const SandboxView& obj, const SandboxInfo& vm) {
  std::optional<std::chrono::steady_clock::time_point> seen;
  {
    std::lock_guard l(mu_);
    if (auto it = first_seen_.find(key); it != first_seen_.end()) seen = it->second;
  }
  Report(key, obj, RunningReport(vm));
  if (seen) start_seconds_->WithLabels({obj.spec.fork_source ? "fork" : "restore"}).Observe(Since(*seen));
}

void SandboxSync::StartVm(const std::string& key, const SandboxView& obj, const std::string& id) {
  auto want = DesiredVmOf(obj);
  if (!want.ok()) return Report(key, obj, {"Failed", "", Bounded(want.status().message()), 0});
  if (want->spec.token_sha256.empty()) {
    // A fork waits for it (its siblings are forked in the same call, each
    // with its token). A restore starts now, in parallel with the
    // operator's token: the VM opens to no token until TokenKnown.
    if (!want->fork_source.empty()) return;  // the operator publishes it; that update requeues
    want->spec.token_later = true;
  }
  auto vm = RestoreOrFork(key, obj, *want);
  if (vm.ok()) {
    // Reported Running (and so Ready) only with the token known: a token
    // published during the restore requeued this key, which now finds the
    // VM and takes the token.
    if (want->spec.token_later) return;
    return ReportStarted(key, obj, *vm);
  }
  const Status& st = vm.status();
  switch (st.code()) {
    case StatusCode::kUnavailable:  // template baking, source starting, node shutting down
      return queue_.AddAfter(key, want->fork_source.empty() ? kWaitTemplate : kWaitSource);
    case StatusCode::kAlreadyExists:
      return queue_.AddAfter(key, kWaitBusy);  // a concurrent pass made it: report it next time
    case StatusCode::kFailedPrecondition:
      if (!want->workspace_ref.empty() && WorkspaceHeldElsewhere(obj, want->workspace_ref, id)) {
        // One writer at a time: another holder has the disk on this node
        // (a per-call run, or a VM still tearing down). Not a failure: the
        // operator shows it as Ready False WorkspaceInUse, and we retry.
        Report(key, obj, {"Waiting", "", Bounded(st.message()), 0});
        return queue_.AddAfter(key, kWaitWorkspace);
      }
      [[fallthrough]];
    case StatusCode::kDeadlineExceeded:
      // A start that timed out on a loaded host (it was torn down) is tried
      // again with backoff before the Sandbox is failed.
      if (queue_.Failures(key) < kStartAttempts - 1) {
        log::Warn("VM start timed out; retrying", {{"sandbox", key}, {"vm", id}, {"error", st.ToString()}});
        return queue_.AddRateLimited(key);
      }
      [[fallthrough]];
    default:
      log::Warn("VM start failed", {{"sandbox", key}, {"vm", id}, {"error", st.ToString()}});
      return Report(key, obj, {"Failed", "", Bounded(st.message()), 0});
  }
}

bool SandboxSync::WorkspaceHeldElsewhere(const SandboxView& obj, const std::string& ref, const std::string& id) {
  if (!workspaces_) return false;
  auto ws = workspaces_->ReadyWorkspace(obj.meta.ns, ref);
  if (!ws) return false;
  auto info = service_->GetWorkspace(*ws);
  return info.ok() && !info->attached_to.empty() && info->attached_to != id;
}

Result<SandboxInfo> SandboxSync::RestoreOrFork(const std::string& key, const SandboxView& obj, const DesiredVm& want) {
  const std::string& ns = obj.meta.ns;
  if (want.fork_source.empty()) {
    ASSIGN_OR_RETURN(std::string tmpl, templates_->ReadyTemplateFor(ns, want.template_name, want.shape));
    SandboxSpec spec = want.spec;
    spec.template_name = tmpl;
    if (!want.workspace_ref.empty()) {
      auto ws = workspaces_ ? workspaces_->ReadyWorkspace(ns, want.workspace_ref) : std::nullopt;
      if (!ws) return Status::Unavailable("workspace " + want.workspace_ref + " is not ready on this node yet");
      spec.workspace = *ws;
    }
    return service_->CreateSandbox(spec);
  }
  return Fork(key, obj, want);
}

Result<SandboxInfo> SandboxSync::Fork(const std::string& key, const SandboxView& obj, const DesiredVm& want) {
  const std::string& ns = obj.meta.ns;
  auto source = informer_.Get(kube::ObjectKey(ns, want.fork_source));
  if (!source) {
    return Status::FailedPrecondition("fork source " + kube::ObjectKey(ns, want.fork_source) +
                                      " is not a Sandbox on node " + config_.node_name);
  }
  const SandboxView src = SandboxView::Parse(std::move(*source));
  if (src.meta.deleting) return Status::FailedPrecondition("fork source " + want.fork_source + " is being deleted");
  const std::string source_id = SandboxNodeId(src.meta.uid);
  auto src_vm = service_->GetSandbox(source_id);
  if (src_vm.ok() && src_vm->state == SandboxState::kSuspended)
    return Status::Unavailable("fork source " + want.fork_source + " is suspended");
  if (!src_vm.ok() || src_vm->state == SandboxState::kCreating) {
    auto reported = ReportedVm(src.status);
    if (reported && (reported->state == "Failed" || reported->state == "Terminated"))
      return Status::FailedPrecondition("fork source " + want.fork_source + " is " + reported->state);
    return Status::Unavailable("fork source " + want.fork_source + " is not running yet");
  }
  {
    std::lock_guard l(mu_);
    if (!claimed_.insert(want.spec.id).second) return Status::AlreadyExists("a fork in flight is creating it");
  }
  auto siblings = ClaimSiblings(key, obj, want.fork_source);
  ForkRequest fr;
  fr.source_id = source_id;
  // Each child's own spec.network (the operator copies the source's).
  fr.children.push_back({want.spec.id, want.spec.token_sha256, want.spec.labels, want.spec.env,
                         want.spec.network});
  std::vector<std::string> ids = {want.spec.id};
  for (const SandboxView& o : siblings) {
    auto d = DesiredVmOf(o);  // ClaimSiblings checked it parses
    fr.children.push_back({d->spec.id, d->spec.token_sha256, d->spec.labels, d->spec.env, d->spec.network});
    ids.push_back(d->spec.id);
  }
  auto kids = service_->ForkSandbox(fr);
  Release(ids);
  if (!kids.ok()) {
    for (const SandboxView& o : siblings) queue_.Add(o.meta.Key());  // each retries (and reports) on its own
    return kids.status();
  }
  if (kids->size() != fr.children.size())
    return Status::Internal("fork returned " + std::to_string(kids->size()) + " children");
  for (size_t i = 0; i < siblings.size(); ++i) {
    Report(siblings[i].meta.Key(), siblings[i], RunningReport((*kids)[i + 1]));
  }
  return (*kids)[0];
}

std::vector<SandboxView> SandboxSync::ClaimSiblings(const std::string& key, const SandboxView& obj,
                                                    const std::string& source) {
  constexpr size_t kMaxBatch = 63;  // with `key`: the runtime's 64 per fork
  const std::string& ns = obj.meta.ns;
  std::vector<SandboxView> candidates;
  informer_.ForEach([&](const Json& o) {
    if (candidates.size() >= kMaxBatch) return;
    // Filtered on what is read without a copy; only candidates are copied.
    const kube::api::ObjectMeta meta = kube::api::ParseObjectMeta(o);
    if (meta.ns != ns || meta.deleting || meta.Key() == key) return;
    const kube::api::SandboxSpec spec = kube::api::ParseSandboxSpec(o, nullptr);
    if (spec.fork_source != source) return;
    const kube::api::SandboxStatus status = kube::api::ParseSandboxStatus(o);
    if (status.has_vm || TokenSha256Of(spec, status).empty()) return;
    candidates.push_back(SandboxView::Parse(o));
  });
  std::vector<SandboxView> out;
  for (SandboxView& o : candidates) {
    auto d = DesiredVmOf(o);
    if (!d.ok() || service_->GetSandbox(d->spec.id).ok()) continue;
    std::lock_guard l(mu_);
    if (claimed_.insert(d->spec.id).second) out.push_back(std::move(o));
  }
  return out;
}

void SandboxSync::Release(const std::vector<std::string>& ids) {
  std::lock_guard l(mu_);
  for (const auto& id : ids) claimed_.erase(id);
}

VmReport SandboxSync::SuspendedReport(const std::string& message) const {
  // No endpoint: clients see the Sandbox is not Ready and do not call it.
  return {"Suspended", "", message, 0};
}

void SandboxSync::Suspend(const std::string& key, const SandboxView& obj, const std::string& id) {
  auto vm = service_->SuspendSandbox(id);
  if (vm.ok()) {
    log::Info("VM suspended", {{"sandbox", key}, {"vm", id}, {"bytes", vm->suspended_bytes}});
    return Report(key, obj, SuspendedReport(""));
  }
  // Still Running: say why the suspend waits (no disk budget, a busy VM)
  // and try again with backoff.
  log::Warn("VM suspend failed; retrying", {{"sandbox", key}, {"vm", id}, {"error", vm.status().ToString()}});
  auto running = service_->GetSandbox(id);
  if (running.ok() && running->state == SandboxState::kRunning) {
    VmReport r = RunningReport(*running);
    r.message = Bounded("suspend waits: " + vm.status().message());
    Report(key, obj, r);
  }
  queue_.AddRateLimited(key);
}

void SandboxSync::Resume(const std::string& key, const SandboxView& obj, const std::string& id) {
  auto vm = service_->ResumeSandbox(id);
  if (vm.ok()) {
    log::Info("VM resumed", {{"sandbox", key}, {"vm", id}});
    return Report(key, obj, RunningReport(*vm));
  }
  // Still Suspended (a failed resume changes nothing): the node may be full
  // for now; try again with backoff, saying why.
  log::Warn("VM resume failed; retrying", {{"sandbox", key}, {"vm", id}, {"error", vm.status().ToString()}});
  Report(key, obj, SuspendedReport(Bounded("resume waits: " + vm.status().message())));
  queue_.AddRateLimited(key);
}

VmReport SandboxSync::RunningReport(const SandboxInfo& vm) const {
  return {"Running", config_.endpoint, "", vm.ready_ms};
}

void SandboxSync::Report(const std::string& key, const SandboxView& obj, const VmReport& report) {
  auto reported = ReportedVm(obj.status);
  auto same = [&](const std::optional<VmReport>& r) {
    // restoreMillis of a re-adopted VM is what was measured when it started.
    return r && r->state == report.state && r->endpoint == report.endpoint && r->message == report.message;
  };
  {
    std::lock_guard l(mu_);
    auto it = written_.find(key);
    if (same(reported) || (it != written_.end() && same(it->second))) return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client_->Patch(kube::SandboxResource(), obj.meta.ns, obj.meta.name, kube::PatchType::kMerge,
                          kube::api::SandboxVmStatusPatch(report, std::chrono::system_clock::now()), "status");
  status_write_seconds_->WithLabels({}).Observe(Since(t0));
  if (!r.ok()) {
    if (kube::IsNotFound(r.status())) return;  // gone: SyncGone follows
    log::Warn("status.vm write failed; retrying", {{"sandbox", key}, {"state", report.state},
                                                   {"error", r.status().ToString()}});
    return queue_.AddRateLimited(key);
  }
  queue_.Forget(key);
  std::lock_guard l(mu_);
  written_[key] = report;
  if (report.state != "Restoring" && report.state != "Forking") first_seen_.erase(key);
}

Result<std::vector<std::string>> SandboxSync::ReapOrphans() {
  // Only VMs that existed before the list began: a VM made after it may
  // belong to an object the list did not see yet.
  const auto listed_at = std::chrono::system_clock::now();
  kube::ListOptions opts;
  opts.label_selector = kube::api::NodeSelector(config_.node_name);
  auto list = client_->List(kube::SandboxResource(), "", opts);
  if (!list.ok()) return list.status();
  std::set<std::string> uids;
  const Json& items = At(*list, {"items"});
  if (items.is_array()) {
    for (const Json& s : items) uids.insert(kube::api::ParseObjectMeta(s).uid);
  }
  ASSIGN_OR_RETURN(std::vector<SandboxInfo> vms, service_->ListSandboxes(kLabelSandboxUid));
  std::vector<std::string> reaped;
  for (const SandboxInfo& vm : vms) {
    auto uid = vm.labels.find(kLabelSandboxUid);
    if (uid == vm.labels.end() || uids.count(uid->second) || vm.created_at >= listed_at) continue;
    Status st = service_->DeleteSandbox(vm.id);
    if (st.ok()) {
      log::Info("reaped a VM whose Sandbox is gone", {{"vm", vm.id}, {"uid", uid->second}});
      reaped.push_back(vm.id);
    }
  }
  return reaped;
}

}  // namespace kubicle::noderuntime::nodeagent
