#include "noderuntime/server/testing/fake_runs.h"

#include "noderuntime/server/testing/fake_sandboxes.h"

namespace kubicle::noderuntime::server::testing {

Result<RunResult> FakeRuns::Run(const RunOptions& options) {
  ++calls_;
  const std::optional<TemplateInfo> t = templates_->Find(options.template_name);
  if (!t) return Status::NotFound("no template '" + options.template_name + "'");
  if (t->state != TemplateState::kReady)
    return Status::FailedPrecondition("template '" + options.template_name + "' is " +
                                      TemplateStateName(t->state));
  const std::string holder = "run-" + std::to_string(next_run_++);
  RETURN_IF_ERROR(workspaces_->Attach(options.workspace, holder));
  ++runs_;
  RunResult out;
  auto exec =
      run_hook ? run_hook(options) : Result<guest::client::ExecResult>(BuiltinExec(options.exec));
  workspaces_->Release(holder);
  ASSIGN_OR_RETURN(out.exec, std::move(exec));
  out.timings = {.restore_ms = 1, .exec_ms = 0, .total_ms = 1};
  return out;
}

}  // namespace kubicle::noderuntime::server::testing
