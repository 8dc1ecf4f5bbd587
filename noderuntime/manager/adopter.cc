// Adopter (adopter.h): sandboxes re-adopted at Open, orphans killed.
#include "noderuntime/manager/adopter.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// SIGKILL, then up to 5 s for it to go, reaped if ours.
void KillAndWait(VmmProcess& vmm) {
  (void)vmm.Signal(SIGKILL);
  WaitExited(vmm.exit_fd(), 5s);
  vmm.Reap();
}

}  // namespace

Status Adopter::AdoptSandboxes() {
  for (const std::string& id : SubDirs(o_.state_dir + "/sandboxes")) {
    const std::string dir = o_.state_dir + "/sandboxes/" + id;
    auto text = ReadFileToString(dir + "/record.json");
    auto rec = text.ok() ? DecodeSandboxRecord(*text) : Result<SandboxRecord>(text.status());
    if (!rec.ok() || rec->info.id != id) {
      // Never completed its first write: its VMM (if any) is an orphan.
      log::Warn("removing sandbox without a readable record",
                {{"sandbox", id}, {"error", rec.ok() ? "id mismatch" : rec.status().ToString()}});
      (void)RemoveTree(dir);
      continue;
    }
    AdoptOne(std::move(rec).value());
  }
  return Status::Ok();
}

void Adopter::AdoptOne(SandboxRecord record) {
  auto sb = std::make_shared<ManagedSandbox>();
  sb->rec = std::move(record);
  SandboxInfo& info = sb->rec.info;
  sb->dir = o_.state_dir + "/sandboxes/" + info.id;
  sb->log_path = sb->dir + "/vmm.log";
  sb->shape = {info.mem_mib, info.vcpus};
  sb->nic = info.network.has_value();
  o_.table->SkipPast(info.cid, sb->rec.generation);
  auto handle = info.vmm_pid > 0
                    ? o_.launcher->Attach(info.vmm_pid, sb->rec.pid_start_time)
                    : Result<std::unique_ptr<VmmProcess>>(Status::NotFound("no VMM was started"));
  if (info.state == SandboxState::kCreating || info.state == SandboxState::kDeleting) {
    // A create never answered (or a delete never finished): finish the job.
    if (handle.ok()) KillAndWait(**handle);
    o_.sweeper->RemoveCgroupSoon(info.id);
    ::unlink(sb->rec.control_path.c_str());
    ::unlink(sb->rec.vsock_path.c_str());
    (void)RemoveTree(sb->dir);
    log::Info("removed unfinished sandbox", {{"sandbox", info.id}, {"state", SandboxStateName(info.state)}});
    return;
  }
  if (info.state == SandboxState::kSuspended) {
    // The snapshot is the sandbox: a VMM still alive died with its suspend
    // between the record and the stop.
    if (handle.ok()) KillAndWait(**handle);
    Status st = o_.suspender->AdoptSuspended(*sb);
    if (!st.ok()) {
      info.state = SandboxState::kFailed;
      info.message = "lost while suspended: " + st.message();
      info.suspended_at.reset();
      info.suspended_bytes = 0;
      o_.supervisor->FreeResources(*sb);
      (void)o_.supervisor->Persist(*sb);
      log::Error("sandbox failed", {{"sandbox", info.id}, {"reason", info.message}});
    } else {
      log::Info("suspended sandbox re-adopted", {{"sandbox", info.id}, {"bytes", info.suspended_bytes}});
    }
    o_.table->Readopt(sb, sb->holds_cid);
    return;
  }
  Status st = info.state == SandboxState::kFailed ? Status::Ok() : handle.status();
  if (info.state == SandboxState::kRunning && st.ok()) {
    sb->vmm = std::move(handle).value();
    auto status = vmm::control::ControlClient(sb->rec.control_path).GetStatus(2s);
    st = status.status();
    // Before the agent: a suspend that died after its snapshot left the VM paused.
    if (st.ok()) o_.suspender->CleanUpUnfinishedSuspend(*sb);
    if (st.ok()) {
      auto agent = guest::client::AgentClient::ConnectVsock(
          sb->rec.vsock_path, guest::protocol::kAgentVsockPort, o_.agent_options,
          guest::client::DeadlineIn(5s));
      st = agent.status();
      if (st.ok()) sb->agent = std::move(agent).value();
    }
    // Sockets a daemon before 0600 was enforced left looser.
    if (st.ok()) st = SetExactMode(sb->rec.control_path, 0600);
    if (st.ok()) st = SetExactMode(sb->rec.vsock_path, 0600);
    if (st.ok()) st = o_.networks->Adopt(*sb);
    if (!st.ok()) KillAndWait(*sb->vmm);
  }
  if (info.state == SandboxState::kRunning && !st.ok()) {
    info.state = SandboxState::kFailed;
    info.message = "lost while the node daemon was down: " + st.message();
    sb->vmm.reset();
    sb->holds_cgroup = true;  // FreeResources removes what is left
    o_.supervisor->FreeResources(*sb);
    (void)o_.supervisor->Persist(*sb);
    o_.vmm_crashes->WithLabels({}).Inc();
    log::Error("sandbox failed", {{"sandbox", info.id}, {"reason", info.message}});
  } else if (info.state == SandboxState::kRunning) {
    o_.capacity->ForceReserve(sb->shape);
    sb->holds_capacity = true;
    sb->holds_cgroup = o_.cgroups->enabled();
    sb->holds_cid = true;
    o_.workspaces->Readopt(*sb);
    Status w = o_.supervisor->Watch(sb);
    if (!w.ok()) log::Error("cannot watch re-adopted VMM", {{"sandbox", info.id}, {"error", w.ToString()}});
    log::Info("sandbox re-adopted", {{"sandbox", info.id}, {"pid", info.vmm_pid}});
  }
  o_.table->Readopt(sb, sb->holds_cid);
}

void Adopter::KillOrphans() {
  std::set<pid_t> owned;
  std::set<std::string> sockets, groups;
  const std::vector<std::shared_ptr<ManagedSandbox>> all = o_.table->All();
  {
    for (auto& sb : all) {
      const std::string& id = sb->rec.info.id;
      std::lock_guard sl(sb->mu);
      if (!sb->vmm) continue;
      owned.insert(sb->rec.info.vmm_pid);
      sockets.insert(fs::path(sb->rec.control_path).filename().string());
      sockets.insert(fs::path(sb->rec.vsock_path).filename().string());
      groups.insert(id);
    }
  }
  for (pid_t pid : o_.launcher->FindVmms(o_.state_dir)) {
    if (owned.count(pid)) continue;
    auto h = o_.launcher->Attach(pid, std::nullopt);
    if (!h.ok()) continue;
    KillAndWait(**h);
    log::Warn("killed orphan kubicle-vmm", {{"pid", pid}});
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(o_.state_dir + "/sock", ec))
    if (!sockets.count(e.path().filename().string())) fs::remove(e.path(), ec);
  for (const auto& e : fs::directory_iterator(o_.state_dir + "/pool", ec))
    fs::remove_all(e.path(), ec);
  for (const std::string& g : o_.cgroups->List())
    if (!groups.count(g)) o_.sweeper->RemoveCgroupSoon(g);
}

}  // namespace kubicle::noderuntime
