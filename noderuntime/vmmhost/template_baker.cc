#include "noderuntime/vmmhost/template_baker.h"

#include <signal.h>
#include <unistd.h>

#include <string_view>
#include <thread>

#include "noderuntime/node_util.h"
#include "noderuntime/vmmhost/vmm_process.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;
using guest::client::AgentClient;

namespace {

// Words of a command with nothing a shell would interpret, else empty.
std::vector<std::string> SimpleWords(const std::string& cmd) {
  std::vector<std::string> words;
  std::string cur;
  for (char c : cmd) {
    if (std::string_view("|&;<>()$`\\\"'*?[]#~=%{}!\n").find(c) != std::string_view::npos) return {};
    if (c == ' ' || c == '\t') {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

}  // namespace

std::vector<pid_t> TemplateBaker::pids() const {
  std::lock_guard l(mu_);
  return {pids_.begin(), pids_.end()};
}

Result<vmm::LaunchSpec> TemplateBaker::VmmSpec(const TemplateSpec& spec, const std::string& dir,
                                               uint32_t cid, const std::string& control,
                                               const std::string& vsock,
                                               const std::optional<Nic>& nic) const {
  vmm::LaunchSpec s = options_.vmm_base;
  s.mode = vmm::LaunchMode::kRun;
  s.kernel_path = spec.kernel;
  s.initrd_path = spec.initrd;
  s.cmdline = spec.cmdline.empty() ? "console=ttyS0" : spec.cmdline;
  if (nic && !nic->cmdline.empty()) s.cmdline += " " + nic->cmdline;
  s.mem_bytes = spec.mem_mib << 20;
  s.vcpus = static_cast<int>(spec.vcpus);
  s.vsock_uds = vsock;
  s.control_path = control;
  s.serial_path = dir + "/bake/serial.log";
  s.guest_cid = cid;
  s.vm_id = "bake-" + spec.name;
  if (nic) {
    ASSIGN_OR_RETURN(s.net, vmm::NetFlagsFor({nic->tap, nic->mac, nic->netns}, std::nullopt));
  }
  for (const std::string& d : spec.disks) {
    ASSIGN_OR_RETURN(vmm::DiskConfig disk, vmm::ParseDiskFlag(d));
    s.disks.push_back(std::move(disk));
  }
  // Every template can take a workspace: a snapshot's devices are fixed.
  s.workspace_slot = true;
  // Writable disks become copy-on-write: the bake's overlay is frozen into a
  // layer under the template (which every sandbox of it then reads).
  if (!spec.disks.empty()) s.layer_dir = dir + "/layers";
  return s;
}

Result<std::string> TemplateBaker::Bake(const TemplateSpec& spec, const std::string& dir,
                                        const std::string& snapshot_dir, const Progress& progress,
                                        const std::optional<Nic>& nic) {
  const std::string bake_dir = dir + "/bake";
  RETURN_IF_ERROR(RemoveTree(snapshot_dir));  // a bake that died half-way
  RETURN_IF_ERROR(RemoveTree(bake_dir));
  RETURN_IF_ERROR(RemoveTree(dir + "/layers"));
  RETURN_IF_ERROR(MakeDirs(bake_dir));
  if (!spec.disks.empty()) RETURN_IF_ERROR(MakeDirs(dir + "/layers"));
  const uint32_t cid = options_.allocate_cid();
  const std::string control = options_.sock_dir + "/" + std::to_string(cid) + ".ctl";
  const std::string vsock = options_.sock_dir + "/" + std::to_string(cid) + ".vsock";
  progress("booting");
  Result<std::unique_ptr<VmmProcess>> vm = Status::Unavailable("not started");
  if (Result<vmm::LaunchSpec> launch = VmmSpec(spec, dir, cid, control, vsock, nic); launch.ok())
    vm = options_.launcher->Spawn(*launch, bake_dir + "/vmm.log");
  else
    vm = launch.status();
  Status st = vm.status();
  if (st.ok()) {
    {
      std::lock_guard l(mu_);
      pids_.insert((*vm)->pid());
    }
    const int exit_fd = (*vm)->exit_fd();
    st = BakeInVm(spec, exit_fd, control, vsock, snapshot_dir, progress);
    if (!st.ok()) {
      std::string tail = TailOfFile(bake_dir + "/vmm.log", 300);
      if (!tail.empty()) st = st.WithContext("vmm.log: " + tail);
    }
    if (!WaitExited(exit_fd, 0ms)) {
      Status r = vmm::control::ControlClient(control).Shutdown(1s);
      if (!r.ok() || !WaitExited(exit_fd, 5s)) (void)(*vm)->Signal(SIGKILL);
      WaitExited(exit_fd, 5s);
    }
    (*vm)->Reap();
    std::lock_guard l(mu_);
    pids_.erase((*vm)->pid());
  }
  ::unlink(control.c_str());
  ::unlink(vsock.c_str());
  options_.release_cid(cid);
  Result<std::string> digest = st;
  if (st.ok()) {
    progress("computing digest");
    digest = Sha256Files({snapshot_dir + "/state", snapshot_dir + "/memory"});
  }
  if (digest.ok()) (void)RemoveTree(bake_dir);
  else (void)RemoveTree(snapshot_dir);
  return digest;
}

Status TemplateBaker::BakeInVm(const TemplateSpec& spec, int exit_fd, const std::string& control,
                               const std::string& vsock, const std::string& snapshot_dir,
                               const Progress& progress) {
  RETURN_IF_ERROR(WaitForControl(control, exit_fd, 30s));
  RETURN_IF_ERROR(SetExactMode(control, 0600));
  progress("waiting for the agent");
  const auto deadline = guest::client::DeadlineIn(options_.boot_timeout);
  std::unique_ptr<AgentClient> agent;
  for (;;) {
    if (stopping_) return Status::Unavailable("node runtime shutting down");
    if (WaitExited(exit_fd, 0ms)) return Status::Unavailable("kubicle-vmm exited during boot");
    auto now = guest::client::Clock::now();
    auto c = AgentClient::ConnectVsock(vsock, guest::protocol::kAgentVsockPort, options_.agent_options,
                                       std::min(deadline, now + 1s));
    if (c.ok()) {
      agent = std::move(c).value();
      break;
    }
    if (now >= deadline) return c.status().WithContext("agent did not answer after boot");
    std::this_thread::sleep_for(5ms);
  }
  RETURN_IF_ERROR(SetExactMode(vsock, 0600));
  for (size_t i = 0; i < spec.warmup.size(); ++i) {
    progress("warm-up " + std::to_string(i + 1) + "/" + std::to_string(spec.warmup.size()) + ": " +
             spec.warmup[i]);
    RETURN_IF_ERROR(RunWarmUp(*agent, spec.warmup[i]));
  }
  agent.reset();  // no host connection is captured in the snapshot
  progress("snapshotting");
  return vmm::control::ControlClient(control).Snapshot({.dir = snapshot_dir, .resume = false}, 120s).status();
}

Status TemplateBaker::RunWarmUp(AgentClient& agent, const std::string& command) {
  guest::protocol::ExecStartRequest req;
  req.shell_command = command;
  auto r = agent.Exec(req, {}, guest::client::DeadlineIn(options_.boot_timeout));
  // A guest without a shell (the test guest) still runs a plain command.
  if (!r.ok() && r.status().code() == StatusCode::kUnimplemented && !SimpleWords(command).empty()) {
    req.shell_command.clear();
    req.argv = SimpleWords(command);
    r = agent.Exec(req, {}, guest::client::DeadlineIn(options_.boot_timeout));
  }
  if (!r.ok()) return r.status().WithContext("warm-up '" + command + "'");
  if (!r->exit_code || *r->exit_code != 0) {
    std::string err(r->stderr_data.begin(), r->stderr_data.end());
    if (err.size() > 300) err = err.substr(err.size() - 300);
    return Status::FailedPrecondition("warm-up '" + command + "' failed (" +
                                      (r->exit_code ? "exit " + std::to_string(*r->exit_code) : "signal") +
                                      "): " + err);
  }
  return Status::Ok();
}

}  // namespace kubicle::noderuntime
