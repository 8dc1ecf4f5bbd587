// FakeSandboxService: SandboxService in memory, for the API's unit tests.
//
// Templates bake instantly (they read "baking" in PutTemplate's answer and
// "ready" afterwards); sandboxes are records with a random token and a
// RAM file table; Exec runs `exec_hook` when set, else a tiny built-in
// command set: `echo ARGS...` (stdout), `fail CODE` (stderr, exit CODE),
// anything else exits 127. Label selectors use the Kubernetes parser
// (kube/label_selector.h) so the fake filters as the manager does.
// calls() counts every service call, so tests can assert that a rejected
// request never reached the service. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "noderuntime/sandbox_service.h"
#include "noderuntime/server/testing/ram_files.h"

namespace kubicle::noderuntime::server::testing {

class FakeSandboxService : public SandboxService {
 public:
  using ExecHook = std::function<Result<guest::client::ExecResult>(const std::string& id,
                                                                   const ExecOptions& options)>;

  Result<TemplateInfo> PutTemplate(const TemplateSpec& spec) override;
  Result<TemplateInfo> GetTemplate(const std::string& name) override;
  std::vector<TemplateInfo> ListTemplates() override;
  Status DeleteTemplate(const std::string& name) override;

  Result<SandboxInfo> CreateSandbox(const SandboxSpec& spec) override;
  Result<std::vector<SandboxInfo>> ForkSandbox(const ForkRequest& request) override;
  Result<SandboxInfo> GetSandbox(const std::string& id) override;
  Result<std::vector<SandboxInfo>> ListSandboxes(const std::string& selector) override;
  Status DeleteSandbox(const std::string& id) override;
  // Suspended: exec and files are FailedPrecondition, the files are kept.
  Result<SandboxInfo> SuspendSandbox(const std::string& id) override;
  Result<SandboxInfo> ResumeSandbox(const std::string& id) override;
  Result<std::vector<std::string>> DeleteSandboxes(const std::string& selector) override;
  bool CheckToken(const std::string& id, const std::string& token) override;
  Status SetSandboxToken(const std::string& id, const std::string& token_sha256) override;

  Result<guest::client::ExecResult> Exec(const std::string& id,
                                         const ExecOptions& options) override;
  Status WriteFile(const std::string& id, const std::string& path,
                   guest::protocol::ByteSpan data, uint32_t mode) override;
  Result<guest::protocol::Bytes> ReadFile(const std::string& id,
                                          const std::string& path) override;
  // Chunks of read_chunk_bytes (the agent's 64 KiB by default); files above
  // max_read_file_bytes are refused by ReadFile as the manager does.
  Status ReadFileStream(const std::string& id, const std::string& path,
                        const guest::client::FileChunkFn& on_chunk) override;
  // The console is what AppendConsole wrote (rotated by RotateConsole);
  // stats are fixed figures per sandbox (SetStats), zero until set.
  Result<ConsoleRead> ReadConsole(const std::string& id, uint64_t offset,
                                  size_t max_bytes) override;
  Result<SandboxStats> GetSandboxStats(const std::string& id) override;
  // Directories are implied by the files under them ("/" always exists).
  Result<guest::protocol::StatReply> StatFile(const std::string& id,
                                              const std::string& path) override;
  Result<std::vector<guest::protocol::DirEntry>> ListFiles(const std::string& id,
                                                           const std::string& path) override;
  Status RemoveFile(const std::string& id, const std::string& path, bool recursive) override;
  // A sandbox has a network once SetGuestNetwork gave it one: its guest is
  // then `host` (an IPv4 address on this machine, "127.0.0.1" in tests),
  // reached with a real connect, so a listener there is the guest's port.
  Result<UniqueFd> ConnectGuestPort(const std::string& id, uint16_t port) override;
  void SetGuestNetwork(const std::string& id, const std::string& host);
  // A run needs a Ready template (FailTemplate makes one Failed); its
  // command goes to run_hook when set, else to the built-in commands.
  // Timings are fixed (restore 1 ms, total 1 ms + the command).
  Result<RunResult> Run(const RunOptions& options) override;
  Status SetRunToken(const std::string& template_name, const std::string& token_sha256) override;
  bool CheckRunToken(const std::string& template_name, const std::string& token) override;
  void FailTemplate(const std::string& name, const std::string& message);
  int runs() const { return runs_.load(); }

  // ---- workspaces (fake_workspaces.cc) ----
  // A workspace is a RAM file table like a sandbox's; a sandbox or run
  // naming one holds it (attached_to) until it is deleted or the run ends,
  // and file calls are refused while it is held, as the manager does.
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
  void AppendConsole(const std::string& id, const std::string& bytes);
  void RotateConsole(const std::string& id);
  void SetStats(const std::string& id, const SandboxStats& stats);
  // Marks a sandbox Failed (its console reads as not running).
  void FailSandbox(const std::string& id, const std::string& message);

  // Set before requests arrive.
  ExecHook exec_hook;
  using RunHook = std::function<Result<guest::client::ExecResult>(const RunOptions& options)>;
  RunHook run_hook;
  // Makes CreateSandbox fail with this status (when not OK). Set it before
  // requests arrive, or with SetCreateError while they do.
  Status create_error;
  // count > 0: only the next `count` creates fail, then create_error is
  // OK again (no sleep in a test decides how many retries see it).
  void SetCreateError(Status s, int count = 0) {
    std::lock_guard l(mu_);
    create_error = std::move(s);
    create_errors_left_ = count;
  }
  size_t read_chunk_bytes = guest::protocol::kMaxChunk;
  // Set: ReadFileStream fails (Unavailable, as when the guest goes away)
  // once it has delivered this many bytes of the file.
  std::optional<size_t> read_fails_after_bytes;
  uint64_t max_read_file_bytes = guest::client::ClientLimits{}.max_read_file_bytes;

  int calls() const { return calls_.load(); }
  size_t sandbox_count() const;
  // The mode of a written file (0 if absent).
  uint32_t file_mode(const std::string& id, const std::string& path) const;

 private:
  struct Sandbox {
    SandboxInfo info;  // info.token always empty
    std::string token_sha256;
    RamFiles files;
    std::string console;
    SandboxStats stats;
    std::string guest_host;  // empty: no network
  };
  struct Workspace {
    WorkspaceInfo info;  // info.token always empty
    std::string token_sha256;
    RamFiles files;
  };
  // The workspace `name` for a file call: NotFound, or FailedPrecondition
  // while attached.
  Result<Workspace*> DetachedWorkspaceLocked(const std::string& name);
  // Takes `name` for `holder` (NotFound, FailedPrecondition naming the
  // holder); empty name: nothing.
  Status AttachWorkspaceLocked(const std::string& name, const std::string& holder);
  void ReleaseWorkspacesOfLocked(const std::string& holder);
  Result<SandboxInfo> NewLocked(SandboxInfo info);
  Status NotSuspendedLocked(const std::string& id) const;
  Result<guest::protocol::Bytes> FileLocked(const std::string& id, const std::string& path);
  // Mints a token unless `token_sha256` is given (or `token_later`: none
  // yet, SetSandboxToken gives it); returns the info with the token.
  Result<SandboxInfo> AddLocked(SandboxInfo info, const std::string& token_sha256, bool token_later = false);

  mutable std::mutex mu_;
  int create_errors_left_ = 0;  // SetCreateError(s, count): failures still to come
  std::map<std::string, TemplateInfo> templates_;
  std::map<std::string, std::string> run_tokens_;  // template -> hex SHA-256
  std::map<std::string, Sandbox> sandboxes_;
  std::map<std::string, Workspace> workspaces_;
  uint64_t next_id_ = 1;
  uint64_t next_run_ = 1;
  uint32_t next_cid_ = 3;
  std::atomic<int> calls_{0};
  std::atomic<int> runs_{0};
};

}  // namespace kubicle::noderuntime::server::testing
