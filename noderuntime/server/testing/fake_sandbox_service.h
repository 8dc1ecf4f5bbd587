// FakeSandboxService: the whole SandboxService in memory, for the API's
// unit tests, made of one small fake per role: FakeTemplates
// (fake_templates.h), FakeSandboxes (lifecycle and guest I/O,
// fake_sandboxes.h), FakeRuns (fake_runs.h) and FakeWorkspaces
// (fake_workspaces.h); the tokens are each role's. A test of one role may
// use that role's fake alone; this one forwards to them, keeps their knobs
// under the names tests set (exec_hook, create_error, ...), and counts every
// service call in calls(), so tests can assert that a rejected request
// never reached the service. Thread-safe.
#pragma once

#include <string>

#include "noderuntime/sandbox_service.h"
#include "noderuntime/server/testing/fake_runs.h"
#include "noderuntime/server/testing/fake_sandboxes.h"
#include "noderuntime/server/testing/fake_templates.h"
#include "noderuntime/server/testing/fake_workspaces.h"

namespace kubicle::noderuntime::server::testing {

class FakeSandboxService : public SandboxService {
 private:
  // The role fakes first: the knobs below refer to their fields.
  FakeTemplates templates_;
  FakeSandboxes sandboxes_;    // holds workspaces_' address only, until it is made
  FakeWorkspaces workspaces_;  // reads in sandboxes_' read_chunk_bytes
  FakeRuns runs_;

 public:
  using ExecHook = FakeSandboxes::ExecHook;
  using RunHook = FakeRuns::RunHook;

  FakeSandboxService();
  FakeSandboxService(const FakeSandboxService&) = delete;
  FakeSandboxService& operator=(const FakeSandboxService&) = delete;

  FakeTemplates& template_fake() { return templates_; }
  FakeSandboxes& sandbox_fake() { return sandboxes_; }
  FakeRuns& run_fake() { return runs_; }
  FakeWorkspaces& workspace_fake() { return workspaces_; }

  Result<TemplateInfo> PutTemplate(const TemplateSpec& spec) override;
  Result<TemplateInfo> GetTemplate(const std::string& name) override;
  std::vector<TemplateInfo> ListTemplates() override;
  Status DeleteTemplate(const std::string& name) override;

  Result<SandboxInfo> CreateSandbox(const SandboxSpec& spec) override;
  Result<std::vector<SandboxInfo>> ForkSandbox(const ForkRequest& request) override;
  Result<SandboxInfo> GetSandbox(const std::string& id) override;
  Result<std::vector<SandboxInfo>> ListSandboxes(const std::string& selector) override;
  Status DeleteSandbox(const std::string& id) override;
  Result<SandboxInfo> SuspendSandbox(const std::string& id) override;
  Result<SandboxInfo> ResumeSandbox(const std::string& id) override;
  Result<std::vector<std::string>> DeleteSandboxes(const std::string& selector) override;
  bool CheckToken(const std::string& id, const std::string& token) override;
  Status SetSandboxToken(const std::string& id, const std::string& token_sha256) override;

  Result<guest::client::ExecResult> Exec(const std::string& id,
                                         const ExecOptions& options) override;
  Status WriteFile(const std::string& id, const std::string& path, guest::protocol::ByteSpan data,
                   uint32_t mode) override;
  Result<guest::protocol::Bytes> ReadFile(const std::string& id, const std::string& path) override;
  Status ReadFileStream(const std::string& id, const std::string& path,
                        const guest::client::FileChunkFn& on_chunk) override;
  Result<ConsoleRead> ReadConsole(const std::string& id, uint64_t offset,
                                  size_t max_bytes) override;
  Result<SandboxStats> GetSandboxStats(const std::string& id) override;
  Result<guest::protocol::StatReply> StatFile(const std::string& id,
                                              const std::string& path) override;
  Result<std::vector<guest::protocol::DirEntry>> ListFiles(const std::string& id,
                                                           const std::string& path) override;
  Status RemoveFile(const std::string& id, const std::string& path, bool recursive) override;
  Result<UniqueFd> ConnectGuestPort(const std::string& id, uint16_t port) override;
  Result<RunResult> Run(const RunOptions& options) override;
  Status SetRunToken(const std::string& template_name, const std::string& token_sha256) override;
  bool CheckRunToken(const std::string& template_name, const std::string& token) override;

  Result<WorkspaceInfo> PutWorkspace(const WorkspaceSpec& spec) override;
  Result<WorkspaceInfo> GetWorkspace(const std::string& name) override;
  std::vector<WorkspaceInfo> ListWorkspaces() override;
  Status DeleteWorkspace(const std::string& name) override;
  bool CheckWorkspaceToken(const std::string& name, const std::string& token) override;
  Status ReadWorkspaceFile(const std::string& name, const std::string& path,
                           const guest::client::FileChunkFn& on_chunk) override;
  Status WriteWorkspaceFile(const std::string& name, const std::string& path,
                            guest::protocol::ByteSpan data, uint32_t mode) override;
  Result<guest::protocol::StatReply> StatWorkspaceFile(const std::string& name,
                                                       const std::string& path) override;
  Result<std::vector<guest::protocol::DirEntry>> ListWorkspaceFiles(
      const std::string& name, const std::string& path) override;
  Status RemoveWorkspaceFile(const std::string& name, const std::string& path,
                             bool recursive) override;

  // The role fakes' knobs and probes (see each fake).
  void SetGuestNetwork(const std::string& id, const std::string& host) {
    sandboxes_.SetGuestNetwork(id, host);
  }
  void FailTemplate(const std::string& name, const std::string& message) {
    templates_.FailTemplate(name, message);
  }
  int runs() const { return runs_.runs(); }
  void AppendConsole(const std::string& id, const std::string& bytes) {
    sandboxes_.AppendConsole(id, bytes);
  }
  void RotateConsole(const std::string& id) { sandboxes_.RotateConsole(id); }
  void SetStats(const std::string& id, const SandboxStats& stats) {
    sandboxes_.SetStats(id, stats);
  }
  void FailSandbox(const std::string& id, const std::string& message) {
    sandboxes_.FailSandbox(id, message);
  }
  ExecHook& exec_hook = sandboxes_.exec_hook;
  RunHook& run_hook = runs_.run_hook;
  Status& create_error = sandboxes_.create_error;
  void SetCreateError(Status s, int count = 0) { sandboxes_.SetCreateError(std::move(s), count); }
  size_t& read_chunk_bytes = sandboxes_.read_chunk_bytes;  // the workspaces' reads too
  std::optional<size_t>& read_fails_after_bytes = sandboxes_.read_fails_after_bytes;
  uint64_t& max_read_file_bytes = sandboxes_.max_read_file_bytes;

  int calls() const {
    return templates_.calls() + sandboxes_.calls() + runs_.calls() + workspaces_.calls();
  }
  size_t sandbox_count() const { return sandboxes_.sandbox_count(); }
  uint32_t file_mode(const std::string& id, const std::string& path) const {
    return sandboxes_.file_mode(id, path);
  }
};

}  // namespace kubicle::noderuntime::server::testing
