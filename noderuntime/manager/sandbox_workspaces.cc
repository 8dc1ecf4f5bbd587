// SandboxWorkspaces (sandbox_workspaces.h): a sandbox's workspace attached,
// mounted, unmounted, released and re-adopted.
#include "noderuntime/manager/sandbox_workspaces.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "common/log.h"
#include "noderuntime/node_util.h"

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

Status SandboxWorkspaces::Attach(ManagedSandbox& sb, const std::string& name) {
  RETURN_IF_ERROR(ValidateId(name, "workspace name"));
  std::string id;
  {
    std::lock_guard l(sb.mu);
    id = sb.rec.info.id;
    if (!sb.workspace_slot)
      return Status::FailedPrecondition("template '" + sb.rec.info.template_name +
                                        "' has no workspace slot (baked before workspaces); bake it again");
  }
  ASSIGN_OR_RETURN(std::string image, store_->Attach(name, id));
  std::lock_guard l(sb.mu);
  sb.rec.info.workspace = name;
  sb.workspace_image = image;
  sb.holds_workspace = true;
  return Status::Ok();
}

// Called with sb.mu held, once the VMM is gone: its writes are in the
// host's page cache; the image is synced before anyone else may take it.
void SandboxWorkspaces::Release(ManagedSandbox& sb) {
  if (!sb.holds_workspace) return;
  sb.holds_workspace = false;
  UniqueFd fd(::open(sb.workspace_image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd || ::fdatasync(fd.get()) != 0)
    log::Warn("workspace sync failed", {{"workspace", sb.rec.info.workspace}, {"error", std::strerror(errno)}});
  store_->Release(sb.rec.info.workspace, sb.rec.info.id);
  log::Info("workspace released", {{"workspace", sb.rec.info.workspace}, {"sandbox", sb.rec.info.id}});
}

Status SandboxWorkspaces::Mount(guest::client::AgentClient& agent, const std::string& name) {
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

void SandboxWorkspaces::Unmount(ManagedSandbox& sb) {
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

void SandboxWorkspaces::Readopt(ManagedSandbox& sb) {
  if (sb.rec.info.workspace.empty()) return;
  auto image = store_->Attach(sb.rec.info.workspace, sb.rec.info.id);
  if (!image.ok()) {
    log::Error("re-adopted sandbox lost its workspace", {{"sandbox", sb.rec.info.id},
                                                          {"error", image.status().ToString()}});
    return;
  }
  sb.workspace_image = *image;
  sb.holds_workspace = true;
}

}  // namespace kubicle::noderuntime
