// SandboxManager::Open's re-adoption: templates and sandboxes from the state
// directory, VMM processes checked by pid + start time, control socket and
// agent; everything of ours that no record owns is killed or removed. And
// which VMMs are owned now, for the sweeper's orphan sweep (OwnedVmms).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) out.push_back(e.path().filename().string());
  return out;
}

// SIGKILL, then up to 5 s for it to go, reaped if ours.
void KillAndWait(VmmProcess& vmm) {
  (void)vmm.Signal(SIGKILL);
  WaitExited(vmm.exit_fd(), 5s);
  vmm.Reap();
}

}  // namespace

Status SandboxManager::LoadTemplates() {
  for (const std::string& name : SubDirs(config_.state_dir + "/templates")) {
    const std::string dir = TemplateDir(name);
    auto text = ReadFileToString(dir + "/spec.json");
    auto rec = text.ok() ? DecodeTemplateRecord(*text) : Result<TemplateRecord>(text.status());
    if (!rec.ok() || rec->info.spec.name != name) {
      // A put that died before its spec was written: nothing refers to it.
      log::Warn("removing unreadable template", {{"template", name},
                                                 {"error", rec.ok() ? "name mismatch" : rec.status().ToString()}});
      (void)RemoveTree(dir);
      continue;
    }
    auto t = std::make_shared<Template>();
    t->info = std::move(rec->info);
    if (t->info.state == TemplateState::kReady &&
        ::access((t->info.snapshot_dir + "/state").c_str(), R_OK) != 0) {
      t->info.state = TemplateState::kFailed;
      t->info.message = "snapshot is missing from " + t->info.snapshot_dir;
    }
    if (t->info.state == TemplateState::kBaking) t->info.message = "bake restarted after a daemon restart";
    std::lock_guard l(mu_);
    templates_[name] = t;
  }
  return Status::Ok();
}

Status SandboxManager::AdoptSandboxes() {
  for (const std::string& id : SubDirs(config_.state_dir + "/sandboxes")) {
    const std::string dir = SandboxDir(id);
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

void SandboxManager::AdoptOne(SandboxRecord record) {
  auto sb = std::make_shared<Sandbox>();
  sb->rec = std::move(record);
  SandboxInfo& info = sb->rec.info;
  sb->dir = SandboxDir(info.id);
  sb->log_path = sb->dir + "/vmm.log";
  sb->shape = {info.mem_mib, info.vcpus};
  sb->nic = info.network.has_value();
  table_->SkipPast(info.cid, sb->rec.generation);
  auto handle = info.vmm_pid > 0
                    ? config_.launcher->Attach(info.vmm_pid, sb->rec.pid_start_time)
                    : Result<std::unique_ptr<VmmProcess>>(Status::NotFound("no VMM was started"));
  if (info.state == SandboxState::kCreating || info.state == SandboxState::kDeleting) {
    // A create never answered (or a delete never finished): finish the job.
    if (handle.ok()) KillAndWait(**handle);
    sweeper_->RemoveCgroupSoon(info.id);
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
    Status st = AdoptSuspended(*sb);
    if (!st.ok()) {
      info.state = SandboxState::kFailed;
      info.message = "lost while suspended: " + st.message();
      info.suspended_at.reset();
      info.suspended_bytes = 0;
      FreeResources(*sb);
      (void)Persist(*sb);
      log::Error("sandbox failed", {{"sandbox", info.id}, {"reason", info.message}});
    } else {
      log::Info("suspended sandbox re-adopted", {{"sandbox", info.id}, {"bytes", info.suspended_bytes}});
    }
    table_->Readopt(sb, sb->holds_cid);
    return;
  }
  Status st = info.state == SandboxState::kFailed ? Status::Ok() : handle.status();
  if (info.state == SandboxState::kRunning && st.ok()) {
    sb->vmm = std::move(handle).value();
    auto status = vmm::control::ControlClient(sb->rec.control_path).GetStatus(2s);
    st = status.status();
    // Before the agent: a suspend that died after its snapshot left the VM paused.
    if (st.ok()) CleanUpUnfinishedSuspend(*sb);
    if (st.ok()) {
      auto agent = guest::client::AgentClient::ConnectVsock(
          sb->rec.vsock_path, guest::protocol::kAgentVsockPort, AgentOptions(),
          guest::client::DeadlineIn(5s));
      st = agent.status();
      if (st.ok()) sb->agent = std::move(agent).value();
    }
    // Sockets a daemon before 0600 was enforced left looser.
    if (st.ok()) st = SetExactMode(sb->rec.control_path, 0600);
    if (st.ok()) st = SetExactMode(sb->rec.vsock_path, 0600);
    if (st.ok()) st = AdoptNetwork(*sb);
    if (!st.ok()) KillAndWait(*sb->vmm);
  }
  if (info.state == SandboxState::kRunning && !st.ok()) {
    info.state = SandboxState::kFailed;
    info.message = "lost while the node daemon was down: " + st.message();
    sb->vmm.reset();
    sb->holds_cgroup = true;  // FreeResources removes what is left
    FreeResources(*sb);
    (void)Persist(*sb);
    vmm_crashes_->WithLabels({}).Inc();
    log::Error("sandbox failed", {{"sandbox", info.id}, {"reason", info.message}});
  } else if (info.state == SandboxState::kRunning) {
    capacity_->ForceReserve(sb->shape);
    sb->holds_capacity = true;
    sb->holds_cgroup = cgroups_.enabled();
    sb->holds_cid = true;
    ReadoptWorkspace(*sb);
    Status w = Watch(sb);
    if (!w.ok()) log::Error("cannot watch re-adopted VMM", {{"sandbox", info.id}, {"error", w.ToString()}});
    log::Info("sandbox re-adopted", {{"sandbox", info.id}, {"pid", info.vmm_pid}});
  }
  table_->Readopt(sb, sb->holds_cid);
}

void SandboxManager::KillOrphans() {
  std::set<pid_t> owned;
  std::set<std::string> sockets, groups;
  const std::vector<std::shared_ptr<Sandbox>> all = table_->All();
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
  for (pid_t pid : config_.launcher->FindVmms(config_.state_dir)) {
    if (owned.count(pid)) continue;
    auto h = config_.launcher->Attach(pid, std::nullopt);
    if (!h.ok()) continue;
    KillAndWait(**h);
    log::Warn("killed orphan kubicle-vmm", {{"pid", pid}});
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(config_.state_dir + "/sock", ec))
    if (!sockets.count(e.path().filename().string())) fs::remove(e.path(), ec);
  for (const auto& e : fs::directory_iterator(config_.state_dir + "/pool", ec)) fs::remove_all(e.path(), ec);
  for (const std::string& g : cgroups_.List())
    if (!groups.count(g)) sweeper_->RemoveCgroupSoon(g);
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

}  // namespace kubicle::noderuntime
