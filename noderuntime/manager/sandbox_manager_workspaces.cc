// SandboxManager: workspaces (docs/workspaces.md). The store
// (workspace_store.h) keeps the images, records and who holds each one;
// here they meet sandboxes: a create or run attaches one (the restore
// plugs its image into the template's workspace slot, then a Linux guest
// mounts it at /workspace), a delete, a run's end or a VMM's exit releases
// it (the guest unmounts it first when it still answers), and a restarted
// node gives each re-adopted sandbox its workspace back.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/manager/managed_sandbox.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;

namespace {

// Mounts the device whose virtio-blk serial is "workspace" at /workspace.
// The capacity arrives with a config-change interrupt the kernel handles
// in a work item, so the size is awaited (up to 5 s) before the mount.
constexpr char kMountScript[] =
    "dev=; for d in /sys/block/vd*; do "
    "[ \"$(cat $d/serial 2>/dev/null)\" = workspace ] && dev=${d##*/}; done; "
    "[ -n \"$dev\" ] || { echo 'no workspace device' >&2; exit 3; }; "
    "i=0; while [ \"$(cat /sys/block/$dev/size)\" = 0 ] && [ $i -lt 500 ]; do "
    "sleep 0.01; i=$((i+1)); done; "
    "[ -e /dev/$dev ] || mknod /dev/$dev b $(cut -d: -f1 /sys/block/$dev/dev) "
    "$(cut -d: -f2 /sys/block/$dev/dev); "
    "mkdir -p /workspace && mount -t ext4 -o noatime /dev/$dev /workspace";
// Processes still using it are killed so the unmount leaves a clean file
// system (no journal to replay before the host may read it).
constexpr char kUnmountScript[] =
    "cd /; fuser -k -m /workspace >/dev/null 2>&1; sync; umount /workspace";

}  // namespace

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
    o.helper.helper = (slash == std::string::npos ? std::string(".") : vmm.substr(0, slash)) + "/kubicle-ext4";
  }
  ASSIGN_OR_RETURN(workspaces_, WorkspaceStore::Open(std::move(o)));
  return Status::Ok();
}

Status SandboxManager::AttachWorkspace(Sandbox& sb, const std::string& name) {
  RETURN_IF_ERROR(ValidateId(name, "workspace name"));
  std::string id;
  {
    std::lock_guard l(sb.mu);
    id = sb.rec.info.id;
    if (!sb.workspace_slot)
      return Status::FailedPrecondition("template '" + sb.rec.info.template_name +
                                        "' has no workspace slot (baked before workspaces); bake it again");
  }
  ASSIGN_OR_RETURN(std::string image, workspaces_->Attach(name, id));
  std::lock_guard l(sb.mu);
  sb.rec.info.workspace = name;
  sb.workspace_image = image;
  sb.holds_workspace = true;
  return Status::Ok();
}

// Called with sb.mu held, once the VMM is gone: its writes are in the
// host's page cache; the image is synced before anyone else may take it.
void SandboxManager::ReleaseWorkspace(Sandbox& sb) {
  if (!sb.holds_workspace) return;
  sb.holds_workspace = false;
  UniqueFd fd(::open(sb.workspace_image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd || ::fdatasync(fd.get()) != 0)
    log::Warn("workspace sync failed", {{"workspace", sb.rec.info.workspace}, {"error", std::strerror(errno)}});
  workspaces_->Release(sb.rec.info.workspace, sb.rec.info.id);
  log::Info("workspace released", {{"workspace", sb.rec.info.workspace}, {"sandbox", sb.rec.info.id}});
}

Status SandboxManager::MountWorkspace(guest::client::AgentClient& agent, const std::string& name) {
  guest::protocol::ExecStartRequest req;
  req.shell_command = kMountScript;
  req.as_agent = true;  // mount needs root, whatever the image's User
  auto r = agent.Exec(req, {}, guest::client::DeadlineIn(10s));
  // A guest without a shell (the test guest) uses the disk raw.
  if (!r.ok() && r.status().code() == StatusCode::kUnimplemented) return Status::Ok();
  if (!r.ok()) return r.status().WithContext("mounting workspace " + name);
  if (r->exit_code != 0) {
    std::string err(r->stderr_data.begin(), r->stderr_data.end());
    if (err.size() > 300) err.resize(300);
    return Status::FailedPrecondition("mounting workspace " + name + " at /workspace failed (exit " +
                                      std::to_string(r->exit_code.value_or(-1)) + "): " + err);
  }
  return Status::Ok();
}

void SandboxManager::UnmountWorkspace(Sandbox& sb) {
  std::shared_ptr<guest::client::AgentClient> agent;
  {
    std::lock_guard l(sb.mu);
    if (!sb.holds_workspace || sb.exited || sb.rec.info.state != SandboxState::kRunning) return;
    agent = sb.agent;
  }
  if (!agent) return;
  guest::protocol::ExecStartRequest req;
  req.shell_command = kUnmountScript;
  req.as_agent = true;
  auto r = agent->Exec(req, {}, guest::client::DeadlineIn(10s));
  if (r.ok() && r->exit_code != 0)
    log::Warn("workspace unmount failed", {{"sandbox", sb.rec.info.id}, {"workspace", sb.rec.info.workspace},
                                           {"exit", r->exit_code.value_or(-1)}});
}

void SandboxManager::ReadoptWorkspace(Sandbox& sb) {
  if (sb.rec.info.workspace.empty()) return;
  auto image = workspaces_->Attach(sb.rec.info.workspace, sb.rec.info.id);
  if (!image.ok()) {
    log::Error("re-adopted sandbox lost its workspace", {{"sandbox", sb.rec.info.id},
                                                          {"error", image.status().ToString()}});
    return;
  }
  sb.workspace_image = *image;
  sb.holds_workspace = true;
}

Result<WorkspaceInfo> SandboxManager::PutWorkspace(const WorkspaceSpec& spec) { return workspaces_->Put(spec); }
Result<WorkspaceInfo> SandboxManager::GetWorkspace(const std::string& name) { return workspaces_->Get(name); }
std::vector<WorkspaceInfo> SandboxManager::ListWorkspaces() { return workspaces_->List(); }
Status SandboxManager::DeleteWorkspace(const std::string& name) { return workspaces_->Delete(name); }
bool SandboxManager::CheckWorkspaceToken(const std::string& name, const std::string& token) {
  return workspaces_->CheckToken(name, token);
}
Status SandboxManager::ReadWorkspaceFile(const std::string& name, const std::string& path,
                                         const guest::client::FileChunkFn& on_chunk) {
  return workspaces_->ReadFile(name, path, on_chunk);
}
Status SandboxManager::WriteWorkspaceFile(const std::string& name, const std::string& path,
                                          guest::protocol::ByteSpan data, uint32_t mode) {
  return workspaces_->WriteFile(name, path, data, mode);
}
Result<guest::protocol::StatReply> SandboxManager::StatWorkspaceFile(const std::string& name,
                                                                     const std::string& path) {
  return workspaces_->StatFile(name, path);
}
Result<std::vector<guest::protocol::DirEntry>> SandboxManager::ListWorkspaceFiles(
    const std::string& name, const std::string& path) {
  return workspaces_->ListFiles(name, path);
}
Status SandboxManager::RemoveWorkspaceFile(const std::string& name, const std::string& path,
                                           bool recursive) {
  return workspaces_->RemoveFile(name, path, recursive);
}

}  // namespace kubicle::noderuntime
