// FakeSandboxService (fake_sandbox_service.h): each call forwarded to its role's fake.
#include "noderuntime/server/testing/fake_sandbox_service.h"

namespace kubicle::noderuntime::server::testing {

FakeSandboxService::FakeSandboxService()
    : sandboxes_(&templates_, &workspaces_),
      workspaces_(&sandboxes_.read_chunk_bytes),
      runs_(&templates_, &workspaces_) {
  templates_.user_of = [this](const std::string& name) { return sandboxes_.UserOfTemplate(name); };
}

Result<TemplateInfo> FakeSandboxService::PutTemplate(const TemplateSpec& spec) {
  return templates_.PutTemplate(spec);
}

Result<TemplateInfo> FakeSandboxService::GetTemplate(const std::string& name) {
  return templates_.GetTemplate(name);
}

std::vector<TemplateInfo> FakeSandboxService::ListTemplates() { return templates_.ListTemplates(); }

Status FakeSandboxService::DeleteTemplate(const std::string& name) {
  return templates_.DeleteTemplate(name);
}

Result<SandboxInfo> FakeSandboxService::CreateSandbox(const SandboxSpec& spec) {
  return sandboxes_.CreateSandbox(spec);
}

Result<std::vector<SandboxInfo>> FakeSandboxService::ForkSandbox(const ForkRequest& request) {
  return sandboxes_.ForkSandbox(request);
}

Result<SandboxInfo> FakeSandboxService::GetSandbox(const std::string& id) {
  return sandboxes_.GetSandbox(id);
}

Result<std::vector<SandboxInfo>> FakeSandboxService::ListSandboxes(const std::string& selector) {
  return sandboxes_.ListSandboxes(selector);
}

Status FakeSandboxService::DeleteSandbox(const std::string& id) {
  return sandboxes_.DeleteSandbox(id);
}

Result<SandboxInfo> FakeSandboxService::SuspendSandbox(const std::string& id) {
  return sandboxes_.SuspendSandbox(id);
}

Result<SandboxInfo> FakeSandboxService::ResumeSandbox(const std::string& id) {
  return sandboxes_.ResumeSandbox(id);
}

Result<std::vector<std::string>> FakeSandboxService::DeleteSandboxes(const std::string& selector) {
  return sandboxes_.DeleteSandboxes(selector);
}

bool FakeSandboxService::CheckToken(const std::string& id, const std::string& token) {
  return sandboxes_.CheckToken(id, token);
}

Status FakeSandboxService::SetSandboxToken(const std::string& id, const std::string& token_sha256) {
  return sandboxes_.SetSandboxToken(id, token_sha256);
}

Result<guest::client::ExecResult> FakeSandboxService::Exec(const std::string& id,
                                                           const ExecOptions& options) {
  return sandboxes_.Exec(id, options);
}

Status FakeSandboxService::WriteFile(const std::string& id, const std::string& path,
                                     guest::protocol::ByteSpan data, uint32_t mode) {
  return sandboxes_.WriteFile(id, path, data, mode);
}

Result<guest::protocol::Bytes> FakeSandboxService::ReadFile(const std::string& id,
                                                            const std::string& path) {
  return sandboxes_.ReadFile(id, path);
}

Status FakeSandboxService::ReadFileStream(const std::string& id, const std::string& path,
                                          const guest::client::FileChunkFn& on_chunk) {
  return sandboxes_.ReadFileStream(id, path, on_chunk);
}

Result<ConsoleRead> FakeSandboxService::ReadConsole(const std::string& id, uint64_t offset,
                                                    size_t max_bytes) {
  return sandboxes_.ReadConsole(id, offset, max_bytes);
}

Result<SandboxStats> FakeSandboxService::GetSandboxStats(const std::string& id) {
  return sandboxes_.GetSandboxStats(id);
}

Result<guest::protocol::StatReply> FakeSandboxService::StatFile(const std::string& id,
                                                                const std::string& path) {
  return sandboxes_.StatFile(id, path);
}

Result<std::vector<guest::protocol::DirEntry>> FakeSandboxService::ListFiles(
    const std::string& id, const std::string& path) {
  return sandboxes_.ListFiles(id, path);
}

Status FakeSandboxService::RemoveFile(const std::string& id, const std::string& path,
                                      bool recursive) {
  return sandboxes_.RemoveFile(id, path, recursive);
}

Result<UniqueFd> FakeSandboxService::ConnectGuestPort(const std::string& id, uint16_t port) {
  return sandboxes_.ConnectGuestPort(id, port);
}

Result<RunResult> FakeSandboxService::Run(const RunOptions& options) { return runs_.Run(options); }

Status FakeSandboxService::SetRunToken(const std::string& template_name,
                                       const std::string& token_sha256) {
  return templates_.SetRunToken(template_name, token_sha256);
}

bool FakeSandboxService::CheckRunToken(const std::string& template_name, const std::string& token) {
  return templates_.CheckRunToken(template_name, token);
}

Result<WorkspaceInfo> FakeSandboxService::PutWorkspace(const WorkspaceSpec& spec) {
  return workspaces_.PutWorkspace(spec);
}

Result<WorkspaceInfo> FakeSandboxService::GetWorkspace(const std::string& name) {
  return workspaces_.GetWorkspace(name);
}

std::vector<WorkspaceInfo> FakeSandboxService::ListWorkspaces() {
  return workspaces_.ListWorkspaces();
}

Status FakeSandboxService::DeleteWorkspace(const std::string& name) {
  return workspaces_.DeleteWorkspace(name);
}

bool FakeSandboxService::CheckWorkspaceToken(const std::string& name, const std::string& token) {
  return workspaces_.CheckToken(name, token);
}

Status FakeSandboxService::ReadWorkspaceFile(const std::string& name, const std::string& path,
                                             const guest::client::FileChunkFn& on_chunk) {
  return workspaces_.ReadWorkspaceFile(name, path, on_chunk);
}

Status FakeSandboxService::WriteWorkspaceFile(const std::string& name, const std::string& path,
                                              guest::protocol::ByteSpan data, uint32_t mode) {
  return workspaces_.WriteWorkspaceFile(name, path, data, mode);
}

Result<guest::protocol::StatReply> FakeSandboxService::StatWorkspaceFile(const std::string& name,
                                                                         const std::string& path) {
  return workspaces_.StatWorkspaceFile(name, path);
}

Result<std::vector<guest::protocol::DirEntry>> FakeSandboxService::ListWorkspaceFiles(
    const std::string& name, const std::string& path) {
  return workspaces_.ListWorkspaceFiles(name, path);
}

Status FakeSandboxService::RemoveWorkspaceFile(const std::string& name, const std::string& path,
                                               bool recursive) {
  return workspaces_.RemoveWorkspaceFile(name, path, recursive);
}

}  // namespace kubicle::noderuntime::server::testing
