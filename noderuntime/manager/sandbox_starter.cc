// SandboxStarter (sandbox_starter.h): a VM put under a sandbox by a
// restore into a warm-pool VMM or a fork of a running source.
#include "noderuntime/manager/sandbox_starter.h"

#include <signal.h>
#include <stdio.h>

#include <thread>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;
using guest::client::AgentClient;

namespace {

// How long a create or run waits for capacity held by VMs in teardown.
constexpr auto kTeardownWait = 30s;

}  // namespace

std::string SandboxStarter::SockPath(uint32_t cid, const char* kind) const {
  return o_.state_dir + "/sock/" + std::to_string(cid) + "." + kind;
}

Status SandboxStarter::AcquireVm(const VmShape& shape, std::optional<PoolVm>* vm) {
  // A pool VM already starting is further along than one started now.
  *vm = o_.pool->Take(shape, 30s);
  if (*vm) return Status::Ok();  // its capacity reservation comes with it
  Status reserved = ReserveCapacity(shape);
  if (!reserved.ok()) {
    // The capacity may be held by a pool VM of this shape that is starting.
    *vm = o_.pool->Take(shape, 30s);
    if (*vm) return Status::Ok();
    return reserved;
  }
  auto started = o_.pool->StartNow(shape);
  if (!started.ok()) {
    o_.capacity->Release(shape);
    return started.status().WithContext("starting a VMM");
  }
  *vm = std::move(started).value();
  return Status::Ok();
}

Status SandboxStarter::ReserveCapacity(const VmShape& shape) {
  const auto deadline = std::chrono::steady_clock::now() + kTeardownWait;
  while (!o_.capacity->TryReserve(shape)) {
    if (o_.pool->EvictOne(shape)) continue;
    // Runs' VMs being torn down hold capacity that comes back within
    // milliseconds: a burst of runs waits for it rather than fail.
    if (o_.teardowns->WaitForProgress(deadline)) continue;
    auto [mem, vcpus] = o_.capacity->used();
    return Status::ResourceExhausted(
        "node is full: " + std::to_string(mem) + " of " + std::to_string(o_.capacity_mem_mib) +
        " MiB and " + std::to_string(vcpus) + " of " + std::to_string(o_.capacity_vcpus) +
        " vCPUs in use; this sandbox needs " + std::to_string(shape.mem_mib) + " MiB and " +
        std::to_string(shape.vcpus) + " vCPUs");
  }
  return Status::Ok();
}

Status SandboxStarter::StartFromTemplate(const std::shared_ptr<ManagedSandbox>& sb,
                                         const std::string& snapshot_dir,
                                         const std::string& hostname, const std::string& workspace,
                                         const network::EgressPolicy& policy, StepTimes* steps) {
  std::optional<PoolVm> vm;
  // The workspace first of all: a refusal (attached elsewhere) costs
  // nothing. Then the namespace: a pooled one is a list pop, and a refusal
  // (no slot, a policy nft will not load) then costs no VM.
  Status st = workspace.empty() ? Status::Ok() : o_.workspaces->Attach(*sb, workspace);
  if (st.ok()) st = o_.networks->Attach(*sb, policy);
  steps->Mark("net");
  if (st.ok()) st = AcquireVm(sb->shape, &vm);
  steps->Mark("vmm");
  if (!st.ok()) return st;
  {
    std::lock_guard l(sb->mu);
    sb->holds_capacity = true;
  }
  return Restore(sb, snapshot_dir, std::move(vm), hostname, steps, /*resume=*/false);
}

Status SandboxStarter::StartFromSuspend(const std::shared_ptr<ManagedSandbox>& sb,
                                        const std::string& snapshot_dir, StepTimes* steps) {
  std::optional<PoolVm> vm;
  RETURN_IF_ERROR(AcquireVm(sb->shape, &vm));
  {
    std::lock_guard l(sb->mu);
    sb->holds_capacity = true;
    sb->exited = false;
  }
  // An empty hostname keeps the guest's: a resume is the same machine.
  return Restore(sb, snapshot_dir, std::move(vm), "", steps, /*resume=*/true);
}

Status SandboxStarter::Restore(const std::shared_ptr<ManagedSandbox>& sb,
                               const std::string& snapshot_dir, std::optional<PoolVm> vm,
                               const std::string& hostname, StepTimes* steps, bool resume) {
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
    if (::rename(vm->log_path.c_str(), sb->log_path.c_str()) != 0)
      st = Status::FromErrno("rename vmm log");
    else
      vm->log_path = sb->log_path;
  }
  if (!st.ok()) {
    o_.pool->Destroy(*vm);
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
  RETURN_IF_ERROR(o_.supervisor->Watch(sb));
  const auto t0 = std::chrono::steady_clock::now();
  vmm::control::RestoreRequest req;
  req.snapshot = snapshot_dir;
  req.vsock_uds = vsock;
  req.cid = cid;
  req.serial = serial;
  req.id = id;
  req.layer_dir =
      sb->dir;  // writable disks get their private overlay here, so it goes with the sandbox
  {
    std::lock_guard l(sb->mu);
    req.net = SandboxNetworks::AttachmentOf(*sb);
    if (sb->holds_workspace) req.workspace = sb->workspace_image;
  }
  auto r = vmm::control::ControlClient(control).Restore(req, 30s);
  if (!r.ok()) return r.status().WithContext("restore");
  steps->Mark("restore");
  RETURN_IF_ERROR(FinishStart(sb, hostname));
  steps->Mark("agent");
  if (!resume) o_.restore_seconds->WithLabels({}).Observe(SecondsSince(t0));
  return Status::Ok();
}

CgroupLimits LimitsFor(const VmShape& shape, uint64_t overhead_mib) {
  CgroupLimits limits;
  limits.mem_mib = shape.mem_mib;
  limits.vcpus = shape.vcpus;
  limits.overhead_mib = overhead_mib;
  return limits;
}

Status SandboxStarter::SetUpCgroup(ManagedSandbox& sb, const std::string& pool_group) {
  if (!o_.cgroups->enabled()) return Status::Ok();
  o_.sweeper->ForgetCgroup(sb.rec.info.id);  // a previous sandbox of this id
  {
    std::lock_guard l(sb.mu);
    sb.holds_cgroup = true;  // Remove is safe on a partly created group
  }
  // The pool made the VM's group already (same shape, same limits): renaming
  // it is one syscall per hierarchy instead of mkdir, writes and a move.
  if (!pool_group.empty() && o_.cgroups->Rename(pool_group, sb.rec.info.id).ok())
    return Status::Ok();
  RETURN_IF_ERROR(o_.cgroups->Create(sb.rec.info.id, LimitsFor(sb.shape, o_.cgroup_overhead_mib))
                      .WithContext("cgroup"));
  return o_.cgroups->AddProcess(sb.rec.info.id, sb.rec.info.vmm_pid).WithContext("cgroup");
}

Status SandboxStarter::FinishStart(const std::shared_ptr<ManagedSandbox>& sb,
                                   const std::string& hostname) {
  const auto deadline = guest::client::DeadlineIn(o_.agent_timeout);
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
    auto c = AgentClient::ConnectVsock(vsock, guest::protocol::kAgentVsockPort, o_.agent_options,
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
      std::chrono::duration_cast<std::chrono::nanoseconds>(o_.clock().time_since_epoch()).count());
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
  if (!workspace.empty()) RETURN_IF_ERROR(o_.workspaces->Mount(*agent, workspace));
  std::lock_guard l(sb->mu);
  if (sb->delete_requested) return Status::FailedPrecondition("deleted");
  sb->agent = std::move(agent);
  sb->rec.info.state = SandboxState::kRunning;
  return Status::Ok();  // the caller persists the record
}

// Admits a new child (id, CID, generation) and reserves what it needs.
Status SandboxStarter::ReserveForkChild(const std::shared_ptr<ManagedSandbox>& k) {
  SandboxInfo& ki = k->rec.info;
  if (Status added = o_.admit(k); !added.ok())
    return added.code() == StatusCode::kAlreadyExists ? Status::Internal("sandbox id collision")
                                                      : added;
  k->rec.control_path = SockPath(ki.cid, "ctl");
  k->rec.vsock_path = SockPath(ki.cid, "vsock");
  RETURN_IF_ERROR(ReserveCapacity(k->shape));
  k->holds_capacity = true;
  return MakeDirs(k->dir);
}

// Takes hold of every child before anything else, so an abort kills them all.
Status SandboxStarter::AttachForkChildren(const std::vector<std::shared_ptr<ManagedSandbox>>& kids,
                                          const vmm::control::ForkReply& reply) {
  const auto& pids = reply.pids;  // each a positive pid (checked by DecodeReply)
  if (pids.size() != kids.size())
    return Status::DataLoss("fork response has " + std::to_string(pids.size()) + " pids for " +
                            std::to_string(kids.size()) + " children");
  Status attached;
  for (size_t i = 0; i < kids.size(); ++i) {
    auto h = o_.launcher->Attach(static_cast<pid_t>(pids[i]), std::nullopt);
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

Result<std::vector<SandboxInfo>> SandboxStarter::Fork(
    const std::string& source_control, const std::vector<std::shared_ptr<ManagedSandbox>>& kids,
    const std::vector<network::EgressPolicy>& policies) {
  std::vector<std::unique_lock<std::mutex>> ops;  // deletes of a child wait for the fork
  for (auto& k : kids) ops.emplace_back(k->op_mu);
  auto abort_all = [&](Status st) -> Status {
    ops.clear();
    for (auto& k : kids) (void)o_.supervisor->Teardown(k);
    return st;
  };
  vmm::control::ForkRequest fork;
  for (size_t i = 0; i < kids.size(); ++i) {
    const std::shared_ptr<ManagedSandbox>& k = kids[i];
    Status st = ReserveForkChild(k);
    if (st.ok()) st = o_.networks->Attach(*k, policies[i]);
    if (!st.ok()) return abort_all(st);
    fork.children.push_back({.control = k->rec.control_path,
                             .cid = k->rec.info.cid,
                             .vsock_uds = k->rec.vsock_path,
                             .serial = k->dir + "/serial.log",
                             .layer_dir = k->dir,
                             .net = SandboxNetworks::AttachmentOf(*k)});
  }
  // A timeout here may leave children we never heard of: the running orphan sweep ends them.
  auto r = vmm::control::ControlClient(source_control).Fork(fork, 60s);
  if (!r.ok()) return abort_all(r.status().WithContext("fork"));
  Status attached = AttachForkChildren(kids, *r);
  if (!attached.ok()) return abort_all(attached);
  std::vector<SandboxInfo> out;
  for (const auto& k : kids) {
    auto info = FinishForkChild(k);
    if (!info.ok()) return abort_all(info.status());
    out.push_back(*info);
  }
  return out;
}

Result<SandboxInfo> SandboxStarter::FinishForkChild(const std::shared_ptr<ManagedSandbox>& k) {
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(SetUpCgroup(*k, ""));
  RETURN_IF_ERROR(o_.supervisor->Watch(k));
  RETURN_IF_ERROR(FinishStart(k, k->rec.info.id));  // a child is named by its id
  std::lock_guard l(k->mu);
  k->rec.info.ready_ms = SecondsSince(t0) * 1000;
  RETURN_IF_ERROR(o_.supervisor->Persist(*k));
  return k->rec.info;
}

}  // namespace kubicle::noderuntime
