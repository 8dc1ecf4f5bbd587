// SandboxManager: per-call runs. A run restores a VM from the template
// through the same path as a sandbox create (warm-pool VMM, restore, agent,
// POST_RESTORE), runs one command, and hands the VM to the teardown queue.
// The VM is an ephemeral Sandbox (managed_sandbox.h): in the table
// so the orphan sweeps know it is owned, but with no record, hidden from
// Get/List/Find, and killed at any Shutdown.

#include "common/log.h"
#include "common/sha256.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "noderuntime/vmmhost/vmm_process.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) { return SecondsSince(t0) * 1000; }

// "ok": the command ran to an exit code or signal; "timeout": it ran out of
// its time; "error": no VM, or the VM or agent failed under it.
const char* ResultOf(const Result<guest::client::ExecResult>& r) {
  if (!r.ok()) return r.status().code() == StatusCode::kDeadlineExceeded ? "timeout" : "error";
  return r->timed_out ? "timeout" : "ok";
}

}  // namespace

Result<RunResult> SandboxManager::Run(const RunOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(ValidateId(options.template_name, "template name"));
  const auto& req = options.exec.request;
  if (req.argv.empty() == req.shell_command.empty())
    return Status::InvalidArgument("a run needs exactly one of argv (non-empty) and a shell command");
  runs_in_flight_->WithLabels({}).Add(1);
  RunResult out;
  auto vm = StartRunVm(options, &out.timings);
  Result<guest::client::ExecResult> exec = vm.ok() ? ExecInRunVm(**vm, options.exec)
                                                   : Result<guest::client::ExecResult>(vm.status());
  out.timings.exec_ms = MsSince(t0) - out.timings.restore_ms;
  out.timings.total_ms = MsSince(t0);
  // The workspace is the caller's again when Run returns: unmounted in the
  // guest, the VM stopped, the image synced and released. The rest of the
  // teardown stays off the caller's path.
  if (vm.ok() && !options.workspace.empty()) ReleaseRunWorkspace(**vm);
  if (vm.ok()) DiscardRunVm(*vm);
  runs_in_flight_->WithLabels({}).Add(-1);
  CountRun(ResultOf(exec));
  if (!exec.ok()) {
    log::Warn("run failed", {{"template", options.template_name}, {"error", exec.status().ToString()}});
    return exec.status();
  }
  out.exec = std::move(exec).value();
  log::Debug("run finished", {{"template", options.template_name},
                              {"restore_ms", out.timings.restore_ms},
                              {"total_ms", out.timings.total_ms}});
  return out;
}

// The template's VM, restored and answering; on failure nothing is left.
Result<std::shared_ptr<SandboxManager::Sandbox>> SandboxManager::StartRunVm(const RunOptions& options,
                                                                              RunTimings* timings) {
  const auto t0 = std::chrono::steady_clock::now();
  auto sb = std::make_shared<Sandbox>();
  sb->ephemeral = true;
  SandboxInfo& info = sb->rec.info;
  info.id = "run-" + RandomHex(8);
  info.template_name = options.template_name;
  info.created_at = config_.clock();
  std::string snapshot_dir;
  std::unique_lock op(sb->op_mu);  // a Shutdown waits for the restore, then kills it
  Status st = RegisterSandbox(sb, &snapshot_dir);
  if (!st.ok()) return st;  // nothing taken yet
  info.mem_mib = sb->shape.mem_mib;
  info.vcpus = sb->shape.vcpus;
  StepTimes steps;
  st =
      starter_->StartFromTemplate(sb, snapshot_dir, info.id, options.workspace, sb->template_egress,
                                  &steps);  // its namespace a pooled one: a list pop
  if (!st.ok()) {
    op.unlock();
    DiscardRunVm(sb);  // Teardown is safe on a partly built VM
    return st;
  }
  timings->restore_ms = MsSince(t0);
  run_restore_seconds_->WithLabels({}).Observe(SecondsSince(t0));
  return sb;
}

Result<guest::client::ExecResult> SandboxManager::ExecInRunVm(Sandbox& sb, const ExecOptions& exec) {
  Status why;
  auto agent = AgentOf(sb, &why);
  if (!agent) return Status::Unavailable("the run's VM was stopped: " + why.message());
  auto t0 = std::chrono::steady_clock::now();
  guest::protocol::ExecStartRequest request = exec.request;
  const guest::client::Deadline deadline = BoundExec(&request, exec.timeout);
  auto r = agent->Exec(request, exec.io, deadline);
  if (r.ok()) exec_seconds_->WithLabels({}).Observe(SecondsSince(t0));
  return r;
}

void SandboxManager::ReleaseRunWorkspace(Sandbox& sb) {
  workspaces_->Unmount(sb);
  VmmProcess* vmm = nullptr;
  std::string control;
  {
    std::lock_guard l(sb.mu);
    sb.delete_requested = true;  // its exit is no failure
    if (!sb.exited && sb.vmm) vmm = sb.vmm.get();  // stays: only Teardown lets it go
    control = sb.rec.control_path;
  }
  // A clean shutdown, not SIGKILL: kubicle-vmm stops its vCPUs and devices
  // and exits while a helper holds the KVM VM (fast_exit.h), where a
  // SIGKILLed VMM exits only once the kernel has torn its VM down (~15 ms
  // here). Either way no write reaches the image after the exit.
  if (vmm) {
    Status r = vmm::control::ControlClient(control).Shutdown(500ms);
    if (r.ok()) (void)WaitExited(vmm->exit_fd(), 2s);
  }
  supervisor_->StopVm(sb);  // SIGKILL if it is still there
  std::lock_guard l(sb.mu);
  workspaces_->Release(sb);
}

void SandboxManager::DiscardRunVm(std::shared_ptr<Sandbox> sb) {
  teardowns_.Post([this, sb = std::move(sb)] {
    Status s = supervisor_->Teardown(sb);
    if (!s.ok())
      log::Warn("run vm teardown failed", {{"vm", sb->rec.info.id}, {"error", s.ToString()}});
  });
}

Status SandboxManager::SetRunToken(const std::string& template_name, const std::string& token_sha256) {
  if (!token_sha256.empty() && !IsSha256Hex(token_sha256))
    return Status::InvalidArgument("run token hash is not 64 lowercase hex digits");
  std::lock_guard l(mu_);
  auto t = templates_.find(template_name);
  if (t == templates_.end()) return Status::NotFound("no template '" + template_name + "'");
  std::lock_guard tl(t->second->mu);
  t->second->run_token_sha256 = token_sha256;
  return Status::Ok();
}

bool SandboxManager::CheckRunToken(const std::string& template_name, const std::string& token) {
  std::string want;
  {
    std::lock_guard l(mu_);
    auto t = templates_.find(template_name);
    if (t == templates_.end()) return false;
    std::lock_guard tl(t->second->mu);
    want = t->second->run_token_sha256;
  }
  return !want.empty() && !token.empty() && ConstantTimeEqual(Sha256Hex(token), want);
}

void SandboxManager::CountRun(const char* result) { runs_total_->WithLabels({result}).Inc(); }

void SandboxManager::RegisterRunMetrics() {
  runs_total_ = &metrics_->AddCounter("kubicle_runs_total",
                                      "Per-call runs by result (ok, timeout, error)", {"result"});
  for (const char* r : {"ok", "timeout", "error"}) runs_total_->WithLabels({r});
  runs_in_flight_ = &metrics_->AddGauge("kubicle_runs_in_flight", "Per-call runs in progress");
  runs_in_flight_->WithLabels({});
  run_restore_seconds_ = &metrics_->AddHistogram(
      "kubicle_run_restore_seconds", "Per-call run: call start to the new VM's agent answering", {},
      metrics::ExponentialBuckets(0.001, 2, 16));
}

}  // namespace kubicle::noderuntime
