#include "noderuntime/template_baker.h"

#include <signal.h>
#include <unistd.h>

#include <string_view>
#include <thread>

#include "noderuntime/node_util.h"
#include "noderuntime/vmm_process.h"
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

std::vector<std::string> TemplateBaker::VmmArgs(const TemplateSpec& spec, const std::string& dir,
                                                uint32_t cid, const std::string& control,
                                                const std::string& vsock,
                                                const std::optional<Nic>& nic) const {
  const std::string bake_dir = dir + "/bake";
  std::string cmdline = spec.cmdline.empty() ? "console=ttyS0" : spec.cmdline;
  if (nic && !nic->cmdline.empty()) cmdline += " " + nic->cmdline;
  std::vector<std::string> args = {"run", "--kernel", spec.kernel,
                                   "--cmdline", cmdline,
                                   "--mem", std::to_string(spec.mem_mib) + "M",
                                   "--vcpus", std::to_string(spec.vcpus),
                                   "--vsock-uds", vsock, "--control", control,
                                   "--serial", bake_dir + "/serial.log",
                                   "--cid", std::to_string(cid), "--id", "bake-" + spec.name};
  args.insert(args.end(), options_.vmm_flags.begin(), options_.vmm_flags.end());
  if (!spec.initrd.empty()) args.insert(args.end(), {"--initrd", spec.initrd});
  if (nic) args.insert(args.end(), {"--net", "tap=" + nic->tap + ",mac=" + nic->mac + ",netns=" + nic->netns});
  for (const std::string& d : spec.disks) args.insert(args.end(), {"--disk", d});
  // Every template can take a workspace: a snapshot's devices are fixed.
  args.push_back("--workspace-slot");
  // Writable disks become copy-on-write: the bake's overlay is frozen into a
  // layer under the template (which every sandbox of it then reads).
  if (!spec.disks.empty()) args.insert(args.end(), {"--layer-dir", dir + "/layers"});
  return args;
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
  auto vm = options_.launcher->Spawn(VmmArgs(spec, dir, cid, control, vsock, nic), bake_dir + "/vmm.log");
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
