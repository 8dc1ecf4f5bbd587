// FakeWorkspaces: WorkspaceService in memory, for the API's unit tests. A
// workspace is a RAM file table (ram_files.h); a sandbox or a run naming
// one holds it (Attach: attached_to) until it lets go (Release), and file
// calls and deletes are refused while it is held, as the manager does (one
// writer). Thread-safe; it calls nobody, so holders may call it under
// their own locks.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "noderuntime/sandbox_service.h"
#include "noderuntime/server/testing/ram_files.h"

namespace kubicle::noderuntime::server::testing {

class FakeWorkspaces : public WorkspaceService {
 public:
  // Reads go in chunks of *chunk_bytes (the agent's 64 KiB when null).
  explicit FakeWorkspaces(const size_t* chunk_bytes = nullptr)
      : chunk_bytes_(chunk_bytes ? chunk_bytes : &own_chunk_bytes_) {}

  Result<WorkspaceInfo> PutWorkspace(const WorkspaceSpec& spec) override;
  Result<WorkspaceInfo> GetWorkspace(const std::string& name) override;
  std::vector<WorkspaceInfo> ListWorkspaces() override;
  Status DeleteWorkspace(const std::string& name) override;
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
  // TokenService's part for workspaces.
  bool CheckToken(const std::string& name, const std::string& token);

  // Takes `name` for `holder` (NotFound, FailedPrecondition naming the
  // holder); an empty name takes nothing.
  Status Attach(const std::string& name, const std::string& holder);
  // Lets go of every workspace `holder` holds.
  void Release(const std::string& holder);

  int calls() const { return calls_.load(); }

 private:
  struct Workspace {
    WorkspaceInfo info;  // info.token always empty
    std::string token_sha256;
    RamFiles files;
  };
  // The workspace `name` for a file call: NotFound, or FailedPrecondition
  // while attached.
  Result<Workspace*> DetachedLocked(const std::string& name);

  const size_t own_chunk_bytes_ = guest::protocol::kMaxChunk;
  const size_t* const chunk_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, Workspace> workspaces_;
  std::atomic<int> calls_{0};
};

}  // namespace kubicle::noderuntime::server::testing
