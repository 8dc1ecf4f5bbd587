// SandboxManager's templates: put, get, list, delete, and the bake itself on
// a worker thread: cold boot, warm-up commands through the agent, snapshot
// (the VM is left paused and shut down), content digest.
#include <signal.h>
#include <unistd.h>

#include <string_view>
#include <thread>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "noderuntime/sandbox_manager.h"
#include "noderuntime/sandbox_manager_internal.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;
using guest::client::AgentClient;

namespace {

Status CheckTemplateSpec(const TemplateSpec& s) {
  RETURN_IF_ERROR(ValidateId(s.name, "template name"));
  if (s.kernel.empty()) return Status::InvalidArgument("template needs a kernel");
  for (const std::string* path : {&s.kernel, &s.initrd}) {
    if (!path->empty() && ::access(path->c_str(), R_OK) != 0)
      return Status::InvalidArgument("cannot read '" + *path + "'");
  }
  for (const std::string& d : s.disks) {
    std::string path = d.substr(0, d.find(','));
    if (::access(path.c_str(), R_OK) != 0) return Status::InvalidArgument("cannot read disk '" + path + "'");
  }
  if (s.mem_mib < 16 || s.mem_mib > 1024 * 1024) return Status::InvalidArgument("mem_mib must be 16..1048576");
  if (s.vcpus < 1 || s.vcpus > 64) return Status::InvalidArgument("vcpus must be 1..64");
  for (const std::string& w : s.warmup)
    if (w.empty()) return Status::InvalidArgument("empty warm-up command");
  return Status::Ok();
}

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

bool SameSpec(const TemplateSpec& a, const TemplateSpec& b) {
  return a.name == b.name && a.kernel == b.kernel && a.initrd == b.initrd && a.cmdline == b.cmdline &&
         a.disks == b.disks && a.mem_mib == b.mem_mib && a.vcpus == b.vcpus && a.warmup == b.warmup;
}

}  // namespace

std::string SandboxManager::TemplateDir(const std::string& name) const {
  return config_.state_dir + "/templates/" + name;
}

Status SandboxManager::PersistTemplate(const Template& t) {
  return AtomicWriteFile(TemplateDir(t.info.spec.name) + "/spec.json", EncodeTemplateRecord({t.info}));
}

Result<TemplateInfo> SandboxManager::PutTemplate(const TemplateSpec& spec) {
  RETURN_IF_ERROR(CheckTemplateSpec(spec));
  auto t = std::make_shared<Template>();
  {
    std::lock_guard l(mu_);
    if (shut_down_) return Status::Unavailable("the node runtime is shutting down");
    auto it = templates_.find(spec.name);
    if (it != templates_.end()) {
      std::lock_guard tl(it->second->mu);
      if (!SameSpec(it->second->info.spec, spec))
        return Status::AlreadyExists("template '" + spec.name + "' exists with another spec");
      return it->second->info;
    }
    t->info.spec = spec;
    t->info.state = TemplateState::kBaking;
    t->info.message = "queued";
    t->info.snapshot_dir = TemplateDir(spec.name) + "/snapshot";
    Status st = MakeDirs(TemplateDir(spec.name));
    if (st.ok()) st = PersistTemplate(*t);
    if (!st.ok()) {
      (void)RemoveTree(TemplateDir(spec.name));
      return st;
    }
    templates_[spec.name] = t;
  }
  {
    std::lock_guard bl(bake_mu_);
    bakers_.emplace_back([this, t] { Bake(t); });
  }
  log::Info("template bake queued", {{"template", spec.name}});
  std::lock_guard tl(t->mu);
  return t->info;
}

Result<TemplateInfo> SandboxManager::GetTemplate(const std::string& name) {
  RETURN_IF_ERROR(ValidateId(name, "template name"));
  std::shared_ptr<Template> t;
  {
    std::lock_guard l(mu_);
    auto it = templates_.find(name);
    if (it == templates_.end()) return Status::NotFound("no template '" + name + "'");
    t = it->second;
  }
  std::lock_guard tl(t->mu);
  return t->info;
}

std::vector<TemplateInfo> SandboxManager::ListTemplates() {
  std::vector<TemplateInfo> out;
  std::lock_guard l(mu_);
  for (auto& [name, t] : templates_) {
    std::lock_guard tl(t->mu);
    out.push_back(t->info);
  }
  return out;
}

Status SandboxManager::DeleteTemplate(const std::string& name) {
  RETURN_IF_ERROR(ValidateId(name, "template name"));
  std::vector<std::shared_ptr<Sandbox>> all;
  std::shared_ptr<Template> t;
  {
    std::lock_guard l(mu_);
    auto it = templates_.find(name);
    if (it == templates_.end()) return Status::NotFound("no template '" + name + "'");
    t = it->second;
    {
      std::lock_guard tl(t->mu);
      if (t->info.state == TemplateState::kBaking)
        return Status::FailedPrecondition("template '" + name + "' is still baking");
    }
    // Sandboxes map the snapshot's memory file: it must outlive them all.
    // Checked under mu_ so no create can start from this template meanwhile.
    size_t users = 0;
    for (auto& [id, sb] : sandboxes_)
      if (sb->rec.info.template_name == name) ++users;  // immutable after creation
    if (users > 0)
      return Status::FailedPrecondition("template '" + name + "' is used by " + std::to_string(users) +
                                        " sandbox(es)");
    templates_.erase(it);
  }
  std::lock_guard tl(t->mu);
  if (t->in_pool) pool_->Unwant({t->info.spec.mem_mib, t->info.spec.vcpus});
  t->in_pool = false;
  log::Info("template deleted", {{"template", name}});
  return RemoveTree(TemplateDir(name));
}

void SandboxManager::SetTemplateProgress(const std::shared_ptr<Template>& t, const std::string& message) {
  std::lock_guard l(t->mu);
  t->info.message = message;
  log::Info("template bake", {{"template", t->info.spec.name}, {"step", message}});
}

void SandboxManager::Bake(std::shared_ptr<Template> t) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = BakeSteps(t);
  std::lock_guard l(t->mu);
  if (st.ok()) {
    t->info.state = TemplateState::kReady;
    t->info.message = "ready";
    t->info.bake_seconds = SecondsSince(t0);
    t->info.ready_at = config_.clock();
    bake_seconds_->WithLabels({}).Observe(t->info.bake_seconds);
    if (!t->in_pool) pool_->Want({t->info.spec.mem_mib, t->info.spec.vcpus});
    t->in_pool = true;
  } else {
    t->info.state = TemplateState::kFailed;
    t->info.message = st.ToString();
  }
  Status p = PersistTemplate(*t);
  log::Info("template bake finished", {{"template", t->info.spec.name},
                                       {"state", TemplateStateName(t->info.state)},
                                       {"message", t->info.message},
                                       {"digest", t->info.digest},
                                       {"persist", p.ok() ? "ok" : p.ToString()}});
}

Status SandboxManager::BakeSteps(const std::shared_ptr<Template>& t) {
  TemplateSpec spec;
  std::string snapshot_dir;
  {
    std::lock_guard l(t->mu);
    spec = t->info.spec;
    snapshot_dir = t->info.snapshot_dir;
  }
  const std::string dir = TemplateDir(spec.name);
  const std::string bake_dir = dir + "/bake";
  RETURN_IF_ERROR(RemoveTree(snapshot_dir));  // a bake that died half-way
  RETURN_IF_ERROR(RemoveTree(bake_dir));
  RETURN_IF_ERROR(RemoveTree(dir + "/layers"));
  RETURN_IF_ERROR(MakeDirs(bake_dir));
  uint32_t cid;
  {
    std::lock_guard l(mu_);
    cid = AllocateCid();
  }
  const std::string control = SockPath(cid, "ctl"), vsock = SockPath(cid, "vsock");
  std::vector<std::string> argv = {"run", "--kernel", spec.kernel,
                                   "--cmdline", spec.cmdline.empty() ? "console=ttyS0" : spec.cmdline,
                                   "--mem", std::to_string(spec.mem_mib) + "M",
                                   "--vcpus", std::to_string(spec.vcpus),
                                   "--vsock-uds", vsock, "--control", control,
                                   "--serial", bake_dir + "/serial.log",
                                   "--cid", std::to_string(cid), "--id", "bake-" + spec.name};
  for (std::string& f : SerialFlags(config_.console)) argv.push_back(std::move(f));
  if (!spec.initrd.empty()) argv.insert(argv.end(), {"--initrd", spec.initrd});
  for (const std::string& d : spec.disks) argv.insert(argv.end(), {"--disk", d});
  // Writable disks become copy-on-write: the bake's overlay is frozen into a
  // layer under the template (which every sandbox of it then reads).
  if (!spec.disks.empty()) {
    RETURN_IF_ERROR(MakeDirs(dir + "/layers"));
    argv.insert(argv.end(), {"--layer-dir", dir + "/layers"});
  }
  SetTemplateProgress(t, "booting");
  auto vm = config_.launcher->Spawn(argv, bake_dir + "/vmm.log");
  Status st = vm.status();
  if (st.ok()) {
    std::lock_guard l(mu_);
    bake_pids_.insert((*vm)->pid());
  }
  if (st.ok()) {
    const int exit_fd = (*vm)->exit_fd();
    st = BakeInVm(t, spec, exit_fd, control, vsock, snapshot_dir);
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
  }
  ::unlink(control.c_str());
  ::unlink(vsock.c_str());
  {
    std::lock_guard l(mu_);
    cids_.erase(cid);
    if (vm.ok()) bake_pids_.erase((*vm)->pid());
  }
  if (st.ok()) {
    SetTemplateProgress(t, "computing digest");
    auto digest = Sha256Files({snapshot_dir + "/state", snapshot_dir + "/memory"});
    st = digest.status();
    if (st.ok()) {
      std::lock_guard l(t->mu);
      t->info.digest = *digest;
    }
  }
  if (st.ok()) (void)RemoveTree(bake_dir);
  else (void)RemoveTree(snapshot_dir);
  return st;
}

Status SandboxManager::BakeInVm(const std::shared_ptr<Template>& t, const TemplateSpec& spec, int exit_fd,
                                const std::string& control, const std::string& vsock,
                                const std::string& snapshot_dir) {
  RETURN_IF_ERROR(WaitForControl(control, exit_fd, 30s));
  RETURN_IF_ERROR(SetExactMode(control, 0600));
  SetTemplateProgress(t, "waiting for the agent");
  const auto deadline = guest::client::DeadlineIn(config_.bake_boot_timeout);
  std::unique_ptr<AgentClient> agent;
  for (;;) {
    if (stopping_) return Status::Unavailable("node runtime shutting down");
    if (WaitExited(exit_fd, 0ms)) return Status::Unavailable("kubicle-vmm exited during boot");
    auto now = guest::client::Clock::now();
    auto c = AgentClient::ConnectVsock(vsock, guest::protocol::kAgentVsockPort, AgentOptions(),
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
    SetTemplateProgress(t, "warm-up " + std::to_string(i + 1) + "/" + std::to_string(spec.warmup.size()) +
                               ": " + spec.warmup[i]);
    guest::protocol::ExecStartRequest req;
    req.shell_command = spec.warmup[i];
    auto r = agent->Exec(req, {}, guest::client::DeadlineIn(config_.bake_boot_timeout));
    // A guest without a shell (the test guest) still runs a plain command.
    if (!r.ok() && r.status().code() == StatusCode::kUnimplemented && !SimpleWords(spec.warmup[i]).empty()) {
      req.shell_command.clear();
      req.argv = SimpleWords(spec.warmup[i]);
      r = agent->Exec(req, {}, guest::client::DeadlineIn(config_.bake_boot_timeout));
    }
    if (!r.ok()) return r.status().WithContext("warm-up '" + spec.warmup[i] + "'");
    if (!r->exit_code || *r->exit_code != 0) {
      std::string err(r->stderr_data.begin(), r->stderr_data.end());
      if (err.size() > 300) err = err.substr(err.size() - 300);
      return Status::FailedPrecondition("warm-up '" + spec.warmup[i] + "' failed (" +
                                        (r->exit_code ? "exit " + std::to_string(*r->exit_code) : "signal") +
                                        "): " + err);
    }
  }
  agent.reset();  // no host connection is captured in the snapshot
  SetTemplateProgress(t, "snapshotting");
  return vmm::control::ControlClient(control).Snapshot({.dir = snapshot_dir, .resume = false}, 120s).status();
}

}  // namespace kubicle::noderuntime
