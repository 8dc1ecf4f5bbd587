// FakeRuns: RunService in memory, for the API's unit tests. A run needs a
// Ready template (FakeTemplates) and holds the workspace it names
// (FakeWorkspaces) while it runs; its command goes to run_hook when set,
// else to BuiltinExec (fake_sandboxes.h). Timings are fixed (restore 1 ms,
// total 1 ms + the command). Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>

#include "noderuntime/sandbox_service.h"
#include "noderuntime/server/testing/fake_templates.h"
#include "noderuntime/server/testing/fake_workspaces.h"

namespace kubicle::noderuntime::server::testing {

class FakeRuns : public RunService {
 public:
  using RunHook = std::function<Result<guest::client::ExecResult>(const RunOptions& options)>;
  FakeRuns(FakeTemplates* templates, FakeWorkspaces* workspaces)
      : templates_(templates), workspaces_(workspaces) {}

  Result<RunResult> Run(const RunOptions& options) override;

  RunHook run_hook;  // set before requests arrive
  int runs() const { return runs_.load(); }
  int calls() const { return calls_.load(); }

 private:
  FakeTemplates* const templates_;
  FakeWorkspaces* const workspaces_;
  std::atomic<uint64_t> next_run_{1};
  std::atomic<int> runs_{0};
  std::atomic<int> calls_{0};
};

}  // namespace kubicle::noderuntime::server::testing
