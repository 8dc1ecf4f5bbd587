// SandboxManager: creating sandboxes (warm-pool VMM + restore + agent +
// POST_RESTORE) and forking running ones into N copy-on-write children.
#include <signal.h>
#include <stdio.h>

#include <cctype>
#include <cstdio>

#include <thread>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;
using guest::client::AgentClient;

namespace {

constexpr uint32_t kMaxForkCount = 64;
// How long a create or run waits for capacity held by VMs in teardown.
constexpr auto kTeardownWait = 30s;

Status CheckCommon(const Labels& labels, const std::optional<int64_t>& ttl) {
  RETURN_IF_ERROR(ValidateLabels(labels));
  if (ttl && *ttl <= 0) return Status::InvalidArgument("ttl_seconds must be positive");
  return Status::Ok();
}

// The limits of Sandbox spec.env (docs/api.md), applied again here since
// the HTTP API reaches this too.
Status ValidateEnv(const Env& env) {
  constexpr size_t kMaxVars = 256, kMaxValue = 32 * 1024;
  if (env.size() > kMaxVars) return Status::InvalidArgument("env: more than 256 variables");
  for (const auto& [name, value] : env) {
    bool ok = !name.empty() && name.size() <= 256 && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) return Status::InvalidArgument("env: '" + name.substr(0, 80) + "' is not a variable name");
    if (value.size() > kMaxValue || value.find('\0') != std::string::npos)
      return Status::InvalidArgument("env " + name + ": value over 32 KiB or with a NUL byte");
  }
  return Status::Ok();
}

// A given hash is the caller's token (the node agent's); with `later`, no
// hash yet (SetSandboxToken gives it; until then no token opens the
// sandbox); otherwise a new token is minted, returned once and only its
// hash kept.
Status SetToken(const std::string& given_sha256, bool later, std::string* token, std::string* sha256) {
  if (given_sha256.empty() && later) {
    token->clear();
    sha256->clear();
    return Status::Ok();
  }
  if (given_sha256.empty()) {
    *token = RandomHex(32);
    *sha256 = Sha256Hex(*token);
    return Status::Ok();
  }
  bool hex = given_sha256.size() == 64;
  for (char c : given_sha256) hex = hex && std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(static_cast<unsigned char>(c));
  if (!hex) return Status::InvalidArgument("token_sha256 is not 64 lowercase hex digits");
  token->clear();
  *sha256 = given_sha256;
  return Status::Ok();
}

std::string RunLabel(const Labels& l) {
  auto it = l.find("kubicle.dev/run");
  return it == l.end() ? "" : it->second;
}

}  // namespace

Status SandboxManager::AcquireVm(const VmShape& shape, std::optional<PoolVm>* vm) {
  // A pool VM already starting is further along than one started now.
  *vm = pool_->Take(shape, 30s);
  if (*vm) return Status::Ok();  // its capacity reservation comes with it
  Status reserved = ReserveCapacity(shape);
  if (!reserved.ok()) {
    // The capacity may be held by a pool VM of this shape that is starting.
    *vm = pool_->Take(shape, 30s);
    if (*vm) return Status::Ok();
    return reserved;
  }
  auto started = pool_->StartNow(shape);
  if (!started.ok()) {
    capacity_->Release(shape);
    return started.status().WithContext("starting a VMM");
  }
  *vm = std::move(started).value();
  return Status::Ok();
}

Status SandboxManager::ReserveCapacity(const VmShape& shape) {
  const auto deadline = std::chrono::steady_clock::now() + kTeardownWait;
  while (!capacity_->TryReserve(shape)) {
    if (pool_->EvictOne(shape)) continue;
    // Runs' VMs being torn down hold capacity that comes back within
    // milliseconds: a burst of runs waits for it rather than fail.
    if (teardowns_.WaitForProgress(deadline)) continue;
    auto [mem, vcpus] = capacity_->used();
    return Status::ResourceExhausted(
        "node is full: " + std::to_string(mem) + " of " + std::to_string(config_.capacity_mem_mib) +
        " MiB and " + std::to_string(vcpus) + " of " + std::to_string(config_.capacity_vcpus) +
        " vCPUs in use; this sandbox needs " + std::to_string(shape.mem_mib) + " MiB and " +
        std::to_string(shape.vcpus) + " vCPUs");
  }
  return Status::Ok();
}

Result<std::shared_ptr<SandboxManager::Sandbox>> SandboxManager::NewSandbox(const SandboxSpec& spec,
                                                                             std::string* token) {
  RETURN_IF_ERROR(ValidateId(spec.template_name, "template name"));
  if (!spec.id.empty()) RETURN_IF_ERROR(ValidateId(spec.id, "sandbox id"));
  RETURN_IF_ERROR(CheckCommon(spec.labels, spec.ttl_seconds));
  auto sb = std::make_shared<Sandbox>();
  SandboxInfo& info = sb->rec.info;
  info.id = spec.id.empty() ? "sb-" + RandomHex(5) : spec.id;
  RETURN_IF_ERROR(guest::protocol::ValidateHostname(spec.hostname.empty() ? info.id : spec.hostname));
  info.template_name = spec.template_name;
  info.labels = spec.labels;
  info.env = spec.env;
  RETURN_IF_ERROR(ValidateEnv(info.env));
  info.created_at = config_.clock();
  if (spec.ttl_seconds) info.expires_at = info.created_at + std::chrono::seconds(*spec.ttl_seconds);
  RETURN_IF_ERROR(SetToken(spec.token_sha256, spec.token_later, token, &sb->rec.token_sha256));
  return sb;
}

// Under one hold of mu_, so DeleteTemplate cannot slip in between: the
// template is Ready, the id free; the sandbox enters the map as Creating.
Status SandboxManager::RegisterSandbox(const std::shared_ptr<Sandbox>& sb, std::string* snapshot_dir) {
  SandboxInfo& info = sb->rec.info;
  std::lock_guard l(mu_);
  if (shut_down_) return Status::Unavailable("the node runtime is shutting down");
  auto t = templates_.find(info.template_name);
  if (t == templates_.end()) return Status::NotFound("no template '" + info.template_name + "'");
  {
    std::lock_guard tl(t->second->mu);
    const TemplateInfo& ti = t->second->info;
    if (ti.state != TemplateState::kReady)
      return Status::FailedPrecondition("template '" + info.template_name + "' is " +
                                        TemplateStateName(ti.state) + (ti.message.empty() ? "" : ": " + ti.message));
    *snapshot_dir = ti.snapshot_dir;
    sb->shape = {ti.spec.mem_mib, ti.spec.vcpus};
    sb->nic = ti.nic;
    sb->workspace_slot = ti.workspace_slot;
    sb->template_egress = ti.spec.network;
  }
  return table_->Add(sb);  // under mu_: no DeleteTemplate in between
}

Result<SandboxInfo> SandboxManager::CreateSandbox(const SandboxSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string token, snapshot_dir;
  ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, NewSandbox(spec, &token));
  SandboxInfo& info = sb->rec.info;
  const std::string hostname = spec.hostname.empty() ? info.id : spec.hostname;
  std::unique_lock op(sb->op_mu);  // a concurrent delete waits for this create
  RETURN_IF_ERROR(RegisterSandbox(sb, &snapshot_dir));
  info.mem_mib = sb->shape.mem_mib;
  info.vcpus = sb->shape.vcpus;
  std::optional<PoolVm> vm;
  StepTimes steps;
  // The namespace first: a pooled one is a list pop, and a refusal (no
  // slot, a policy nft will not load) then costs no VM.
  // The workspace first of all: a refusal (attached elsewhere) costs nothing.
  Status st = spec.workspace.empty() ? Status::Ok() : AttachWorkspace(*sb, spec.workspace);
  if (st.ok()) st = AttachNetwork(*sb, spec.network.value_or(sb->template_egress));
  steps.Mark("net");
  if (st.ok()) st = AcquireVm(sb->shape, &vm);
  steps.Mark("vmm");
  if (st.ok()) {
    {
      std::lock_guard l(sb->mu);
      sb->holds_capacity = true;
    }
    st = RunCreate(sb, snapshot_dir, std::move(vm), hostname, &steps);
  }
  if (st.ok()) {
    std::lock_guard l(sb->mu);
    sb->rec.info.ready_ms = SecondsSince(t0) * 1000;
    st = Persist(*sb);
    steps.Mark("record");
  }
  if (!st.ok()) {
    bool deleted;
    {
      std::lock_guard l(sb->mu);
      deleted = sb->delete_requested;
    }
    (void)Teardown(sb);
    log::Warn("sandbox create failed", {{"sandbox", info.id}, {"template", info.template_name},
                                        {"run", RunLabel(info.labels)}, {"error", st.ToString()}});
    if (deleted) return Status::FailedPrecondition("sandbox '" + info.id + "' was deleted while being created");
    return st;
  }
  SandboxInfo out;
  {
    std::lock_guard l(sb->mu);
    out = sb->rec.info;
  }
  out.token = token;
  log::Info("sandbox created", {{"sandbox", out.id}, {"run", RunLabel(out.labels)},
                                {"template", out.template_name}, {"ready_ms", out.ready_ms},
                                {"steps_ms", steps.text()}});
  return out;
}

Status SandboxManager::RunCreate(const std::shared_ptr<Sandbox>& sb, const std::string& snapshot_dir,
                                 std::optional<PoolVm> vm, const std::string& hostname, StepTimes* steps,
                                 bool resume) {
  std::string id, control, vsock, serial;
  uint32_t cid;
  {
    std::lock_guard l(sb->mu);
    id = sb->rec.info.id;
    cid = sb->rec.info.cid;
    sb->dir = SandboxDir(id);
    sb->log_path = sb->dir + "/vmm.log";
    sb->rec.control_path = control = SockPath(cid, "ctl");
    sb->rec.vsock_path = vsock = SockPath(cid, "vsock");
    serial = sb->dir + "/serial.log";
  }
  Status st = MakeDirs(sb->dir);
  // Unix sockets and open files move with rename: the VMM keeps serving the
  // control socket and logging, under the sandbox's names.
  if (st.ok() && ::rename(vm->control_path.c_str(), control.c_str()) != 0)
    st = Status::FromErrno("rename control socket");
  if (st.ok()) {
    vm->control_path = control;
    if (::rename(vm->log_path.c_str(), sb->log_path.c_str()) != 0) st = Status::FromErrno("rename vmm log");
    else vm->log_path = sb->log_path;
  }
  if (!st.ok()) {
    pool_->Destroy(*vm);
    return st;
  }
  {
    std::lock_guard l(sb->mu);
    sb->rec.info.vmm_pid = vm->vmm->pid();
    sb->rec.pid_start_time = vm->vmm->start_time();
    sb->vmm = std::move(vm->vmm);
    if (sb->delete_requested) return Status::FailedPrecondition("deleted");
  }
  steps->Mark("files");
  RETURN_IF_ERROR(SetUpCgroup(*sb, vm->name));
  steps->Mark("cgroup");
  // No record until the sandbox runs (one fsync'd write per create): a VMM
  // without a record is an orphan that the next Open() kills.
  RETURN_IF_ERROR(Watch(sb));
  const auto t0 = std::chrono::steady_clock::now();
  vmm::control::RestoreRequest req;
  req.snapshot = snapshot_dir;
  req.vsock_uds = vsock;
  req.cid = cid;
  req.serial = serial;
  req.id = id;
  req.layer_dir = sb->dir;  // writable disks get their private overlay here, so it goes with the sandbox
  {
    std::lock_guard l(sb->mu);
    req.net = NetAttachmentOf(*sb);
    if (sb->holds_workspace) req.workspace = sb->workspace_image;
  }
  auto r = vmm::control::ControlClient(control).Restore(req, 30s);
  if (!r.ok()) return r.status().WithContext("restore");
  steps->Mark("restore");
  RETURN_IF_ERROR(FinishStart(sb, hostname));
  steps->Mark("agent");
  if (!resume) restore_seconds_->WithLabels({}).Observe(SecondsSince(t0));
  return Status::Ok();
}

CgroupLimits SandboxManager::LimitsFor(const VmShape& shape) const {
  CgroupLimits limits;
  limits.mem_mib = shape.mem_mib;
  limits.vcpus = shape.vcpus;
  limits.overhead_mib = config_.cgroup_overhead_mib;
  return limits;
}

Status SandboxManager::SetUpCgroup(Sandbox& sb, const std::string& pool_group) {
  if (!cgroups_.enabled()) return Status::Ok();
  sweeper_->ForgetCgroup(sb.rec.info.id);  // a previous sandbox of this id
  {
    std::lock_guard l(sb.mu);
    sb.holds_cgroup = true;  // Remove is safe on a partly created group
  }
  // The pool made the VM's group already (same shape, same limits): renaming
  // it is one syscall per hierarchy instead of mkdir, writes and a move.
  if (!pool_group.empty() && cgroups_.Rename(pool_group, sb.rec.info.id).ok()) return Status::Ok();
  RETURN_IF_ERROR(cgroups_.Create(sb.rec.info.id, LimitsFor(sb.shape)).WithContext("cgroup"));
  return cgroups_.AddProcess(sb.rec.info.id, sb.rec.info.vmm_pid).WithContext("cgroup");
}

Status SandboxManager::FinishStart(const std::shared_ptr<Sandbox>& sb, const std::string& hostname) {
  const auto deadline = guest::client::DeadlineIn(config_.agent_timeout);
  std::string vsock;
  {
    std::lock_guard l(sb->mu);
    vsock = sb->rec.vsock_path;
  }
  std::unique_ptr<AgentClient> agent;
  Status last = Status::Unavailable("no attempt");
  for (;;) {
    {
      std::lock_guard l(sb->mu);
      if (sb->delete_requested) return Status::FailedPrecondition("deleted");
      if (sb->exited) {
        std::string tail = TailOfFile(sb->log_path, 300);
        return Status::Unavailable("kubicle-vmm exited before the agent answered" +
                                   (tail.empty() ? "" : ": " + tail));
      }
    }
    auto now = guest::client::Clock::now();
    if (now >= deadline) return last.WithContext("agent did not answer in time");
    auto c = AgentClient::ConnectVsock(vsock, guest::protocol::kAgentVsockPort, AgentOptions(),
                                       std::min(deadline, now + 1s));
    if (c.ok()) {
      agent = std::move(c).value();
      break;
    }
    last = c.status();
    std::this_thread::sleep_for(200us);
  }
  // The VMM bound the vsock socket (restore, fork) and a fork child its
  // control socket, under its umask: only the node may reach them.
  {
    std::string control;
    {
      std::lock_guard l(sb->mu);
      control = sb->rec.control_path;
    }
    RETURN_IF_ERROR(SetExactMode(vsock, 0600));
    RETURN_IF_ERROR(SetExactMode(control, 0600));
  }
  guest::protocol::PostRestoreRequest pr;
  pr.entropy_seed = RandomBytes(32);
  pr.wall_clock_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(config_.clock().time_since_epoch()).count());
  pr.hostname = hostname;
  {
    std::lock_guard l(sb->mu);
    pr.generation = sb->rec.generation;
    // The clone's NIC has the MAC its attachment gave the VMM: the guest
    // takes it over too, so its frames carry it.
    if (sb->rec.info.network) pr.nic_mac = MacBytes(sb->rec.info.network->mac);
  }
  auto gen = agent->PostRestore(pr, deadline);
  if (!gen.ok()) return gen.status().WithContext("post-restore");
  std::string workspace;
  {
    std::lock_guard l(sb->mu);
    if (sb->holds_workspace) workspace = sb->rec.info.workspace;
  }
  if (!workspace.empty()) RETURN_IF_ERROR(MountWorkspace(*agent, workspace));
  std::lock_guard l(sb->mu);
  if (sb->delete_requested) return Status::FailedPrecondition("deleted");
  sb->agent = std::move(agent);
  sb->rec.info.state = SandboxState::kRunning;
  return Status::Ok();  // the caller persists the record
}

Result<std::shared_ptr<SandboxManager::Sandbox>> SandboxManager::NewForkChild(
    const ForkRequest& request, const ForkChildSpec* spec, const Sandbox& src, std::string* token) {
  auto k = std::make_shared<Sandbox>();
  SandboxInfo& ki = k->rec.info;
  ki.id = spec && !spec->id.empty() ? spec->id : "sb-" + RandomHex(5);
  ki.template_name = src.rec.info.template_name;
  ki.labels = src.rec.info.labels;
  for (const auto& [key, v] : request.labels) ki.labels[key] = v;
  ki.env = src.rec.info.env;
  if (spec) {
    for (const auto& [key, v] : spec->labels) ki.labels[key] = v;
    if (!spec->env.empty()) ki.env = spec->env;
  }
  ki.labels["kubicle.dev/fork-of"] = request.source_id;
  ki.fork_of = request.source_id;
  ki.created_at = config_.clock();
  if (request.ttl_seconds) ki.expires_at = ki.created_at + std::chrono::seconds(*request.ttl_seconds);
  else ki.expires_at = src.rec.info.expires_at;
  ki.mem_mib = src.shape.mem_mib;
  ki.vcpus = src.shape.vcpus;
  k->shape = src.shape;
  k->nic = src.nic;
  RETURN_IF_ERROR(SetToken(spec ? spec->token_sha256 : "", false, token, &k->rec.token_sha256));
  k->dir = SandboxDir(ki.id);
  k->log_path = src.log_path;  // a fork child keeps logging to its parent's stderr
  return k;
}

// Registers a new child (id, CID, generation) and reserves what it needs.
Status SandboxManager::ReserveForkChild(const std::shared_ptr<Sandbox>& k) {
  SandboxInfo& ki = k->rec.info;
  {
    // Under mu_, so a Shutdown either refuses it or sees it in the table.
    std::lock_guard l(mu_);
    if (shut_down_) return Status::Unavailable("the node runtime is shutting down");
    if (Status added = table_->Add(k); !added.ok())
      return added.code() == StatusCode::kAlreadyExists ? Status::Internal("sandbox id collision") : added;
  }
  k->rec.control_path = SockPath(ki.cid, "ctl");
  k->rec.vsock_path = SockPath(ki.cid, "vsock");
  RETURN_IF_ERROR(ReserveCapacity(k->shape));
  k->holds_capacity = true;
  return MakeDirs(k->dir);
}

// Takes hold of every child before anything else, so an abort kills them all.
Status SandboxManager::AttachForkChildren(const std::vector<std::shared_ptr<Sandbox>>& kids,
                                          const vmm::control::ForkReply& reply) {
  const auto& pids = reply.pids;  // each a positive pid (checked by DecodeReply)
  if (pids.size() != kids.size())
    return Status::DataLoss("fork response has " + std::to_string(pids.size()) + " pids for " +
                            std::to_string(kids.size()) + " children");
  Status attached;
  for (size_t i = 0; i < kids.size(); ++i) {
    auto h = config_.launcher->Attach(static_cast<pid_t>(pids[i]), std::nullopt);
    if (!h.ok()) {
      if (attached.ok()) attached = h.status().WithContext("fork child");
      continue;
    }
    std::lock_guard l(kids[i]->mu);
    kids[i]->rec.info.vmm_pid = (*h)->pid();
    kids[i]->rec.pid_start_time = (*h)->start_time();
    kids[i]->vmm = std::move(h).value();
  }
  return attached;
}

Result<std::vector<SandboxInfo>> SandboxManager::ForkSandbox(const ForkRequest& request) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t count = request.children.empty() ? request.count : request.children.size();
  if (count < 1 || count > kMaxForkCount)
    return Status::InvalidArgument("fork count must be 1.." + std::to_string(kMaxForkCount));
  RETURN_IF_ERROR(CheckCommon(request.labels, request.ttl_seconds));
  for (const ForkChildSpec& c : request.children) {
    if (!c.id.empty()) RETURN_IF_ERROR(ValidateId(c.id, "sandbox id"));
    RETURN_IF_ERROR(CheckCommon(c.labels, std::nullopt));
    RETURN_IF_ERROR(ValidateEnv(c.env));
  }
  ASSIGN_OR_RETURN(auto src, Find(request.source_id));
  std::vector<std::shared_ptr<Sandbox>> kids;
  std::vector<std::string> tokens(count);
  std::vector<network::EgressPolicy> policies(count);
  std::string src_control;
  {
    std::lock_guard l(src->mu);
    if (src->rec.info.state != SandboxState::kRunning)
      return Status::FailedPrecondition("sandbox '" + request.source_id + "' is " +
                                        SandboxStateName(src->rec.info.state));
    // Refused rather than copied: the source writes its workspace in place,
    // so a child's copy would be a full O(size) copy (no reflink here) of a
    // disk whose mounted state lives in the source's page cache
    // (docs/workspaces.md, "Forks").
    if (!src->rec.info.workspace.empty())
      return Status::FailedPrecondition("sandbox '" + request.source_id + "' has workspace '" +
                                        src->rec.info.workspace +
                                        "' attached: a sandbox with a workspace cannot be forked");
    src_control = src->rec.control_path;
    for (uint32_t i = 0; i < count; ++i) {
      const ForkChildSpec* spec = request.children.empty() ? nullptr : &request.children[i];
      ASSIGN_OR_RETURN(auto k, NewForkChild(request, spec, *src, &tokens[i]));
      kids.push_back(std::move(k));
      // A child's own policy, else its source's.
      if (spec && spec->network) policies[i] = *spec->network;
      else if (src->rec.info.network) policies[i] = src->rec.info.network->policy;
    }
  }
  std::vector<std::unique_lock<std::mutex>> ops;  // deletes of a child wait for the fork
  for (auto& k : kids) ops.emplace_back(k->op_mu);
  auto abort_all = [&](Status st) -> Status {
    ops.clear();
    for (auto& k : kids) (void)Teardown(k);
    log::Warn("sandbox fork failed", {{"sandbox", request.source_id}, {"error", st.ToString()}});
    return st;
  };
  vmm::control::ForkRequest fork;
  for (size_t i = 0; i < kids.size(); ++i) {
    const std::shared_ptr<Sandbox>& k = kids[i];
    Status st = ReserveForkChild(k);
    if (st.ok()) st = AttachNetwork(*k, policies[i]);
    if (!st.ok()) return abort_all(st);
    fork.children.push_back({.control = k->rec.control_path,
                             .cid = k->rec.info.cid,
                             .vsock_uds = k->rec.vsock_path,
                             .serial = k->dir + "/serial.log",
                             .layer_dir = k->dir,
                             .net = NetAttachmentOf(*k)});
  }
  // A timeout here may leave children we never heard of: the running orphan sweep ends them.
  auto r = vmm::control::ControlClient(src_control).Fork(fork, 60s);
  if (!r.ok()) return abort_all(r.status().WithContext("fork"));
  Status attached = AttachForkChildren(kids, *r);
  if (!attached.ok()) return abort_all(attached);
  std::vector<SandboxInfo> out;
  for (size_t i = 0; i < kids.size(); ++i) {
    auto info = ForkChild(kids[i], kids[i]->rec.info.id);
    if (!info.ok()) return abort_all(info.status());
    out.push_back(*info);
    out.back().token = tokens[i];
  }
  fork_seconds_->WithLabels({}).Observe(SecondsSince(t0));
  log::Info("sandbox forked", {{"sandbox", request.source_id}, {"run", RunLabel(out[0].labels)},
                               {"template", out[0].template_name}, {"children", kids.size()}});
  return out;
}

Result<SandboxInfo> SandboxManager::ForkChild(const std::shared_ptr<Sandbox>& k,
                                              const std::string& hostname) {
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(SetUpCgroup(*k, ""));
  RETURN_IF_ERROR(Watch(k));
  RETURN_IF_ERROR(FinishStart(k, hostname));
  std::lock_guard l(k->mu);
  k->rec.info.ready_ms = SecondsSince(t0) * 1000;
  RETURN_IF_ERROR(Persist(*k));
  return k->rec.info;
}

}  // namespace kubicle::noderuntime
