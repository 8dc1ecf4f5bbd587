// SandboxManager: workspaces (docs/workspaces.md). Not implemented yet:
// the interface landed first so the Kubernetes side can build on it.
#include "noderuntime/sandbox_manager.h"

namespace kubicle::noderuntime {

namespace {
Status NotYet() { return Status(StatusCode::kUnimplemented, "workspaces are not implemented yet"); }
}  // namespace

Result<WorkspaceInfo> SandboxManager::PutWorkspace(const WorkspaceSpec&) { return NotYet(); }
Result<WorkspaceInfo> SandboxManager::GetWorkspace(const std::string&) { return NotYet(); }
std::vector<WorkspaceInfo> SandboxManager::ListWorkspaces() { return {}; }
Status SandboxManager::DeleteWorkspace(const std::string&) { return NotYet(); }
bool SandboxManager::CheckWorkspaceToken(const std::string&, const std::string&) { return false; }
Status SandboxManager::ReadWorkspaceFile(const std::string&, const std::string&,
                                         const guest::client::FileChunkFn&) {
  return NotYet();
}
Status SandboxManager::WriteWorkspaceFile(const std::string&, const std::string&,
                                          guest::protocol::ByteSpan, uint32_t) {
  return NotYet();
}
Result<guest::protocol::StatReply> SandboxManager::StatWorkspaceFile(const std::string&,
                                                                     const std::string&) {
  return NotYet();
}
Result<std::vector<guest::protocol::DirEntry>> SandboxManager::ListWorkspaceFiles(
    const std::string&, const std::string&) {
  return NotYet();
}
Status SandboxManager::RemoveWorkspaceFile(const std::string&, const std::string&, bool) {
  return NotYet();
}

}  // namespace kubicle::noderuntime
