// FakeSandboxes: SandboxLifecycle and GuestIo in memory, for the API's
// unit tests. Sandboxes are records with a random token (or the caller's
// hash) and a RAM file table (ram_files.h); a create needs its template
// (FakeTemplates) and takes the workspace it names (FakeWorkspaces). Exec
// runs `exec_hook` when set, else BuiltinExec. Label selectors use the
// Kubernetes parser (kube/label_selector.h), as the manager does.
// Thread-safe; it calls the templates' and workspaces' fakes under its own
// lock, never the other way round.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "noderuntime/sandbox_service.h"
#include "noderuntime/server/testing/fake_templates.h"
#include "noderuntime/server/testing/fake_workspaces.h"
#include "noderuntime/server/testing/ram_files.h"

namespace kubicle::noderuntime::server::testing {

// The fakes' guest commands: `echo ARGS...` (stdout), `fail CODE` (stderr,
// exit CODE), anything else exits 127.
guest::client::ExecResult BuiltinExec(const ExecOptions& options);

class FakeSandboxes : public SandboxLifecycle, public GuestIo {
 public:
  using ExecHook = std::function<Result<guest::client::ExecResult>(const std::string& id,
                                                                   const ExecOptions& options)>;
  FakeSandboxes(FakeTemplates* templates, FakeWorkspaces* workspaces)
      : templates_(templates), workspaces_(workspaces) {}

  Result<SandboxInfo> CreateSandbox(const SandboxSpec& spec) override;
  Result<std::vector<SandboxInfo>> ForkSandbox(const ForkRequest& request) override;
  Result<SandboxInfo> GetSandbox(const std::string& id) override;
  Result<std::vector<SandboxInfo>> ListSandboxes(const std::string& selector) override;
  Status DeleteSandbox(const std::string& id) override;
  // Suspended: exec and files are FailedPrecondition, the files are kept.
  Result<SandboxInfo> SuspendSandbox(const std::string& id) override;
  Result<SandboxInfo> ResumeSandbox(const std::string& id) override;
  Result<std::vector<std::string>> DeleteSandboxes(const std::string& selector) override;

  Result<guest::client::ExecResult> Exec(const std::string& id,
                                         const ExecOptions& options) override;
  Status WriteFile(const std::string& id, const std::string& path, guest::protocol::ByteSpan data,
                   uint32_t mode) override;
  Result<guest::protocol::Bytes> ReadFile(const std::string& id, const std::string& path) override;
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

  // TokenService's part for sandboxes.
  bool CheckToken(const std::string& id, const std::string& token);
  Status SetSandboxToken(const std::string& id, const std::string& token_sha256);

  void AppendConsole(const std::string& id, const std::string& bytes);
  void RotateConsole(const std::string& id);
  void SetStats(const std::string& id, const SandboxStats& stats);
  // Marks a sandbox Failed (its console reads as not running).
  void FailSandbox(const std::string& id, const std::string& message);
  // The first sandbox (by id) of template `name`, "" if none.
  std::string UserOfTemplate(const std::string& name) const;

  // Set before requests arrive.
  ExecHook exec_hook;
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
  Result<SandboxInfo> NewLocked(SandboxInfo info);
  Status NotSuspendedLocked(const std::string& id) const;
  Result<guest::protocol::Bytes> FileLocked(const std::string& id, const std::string& path);
  // Mints a token unless `token_sha256` is given (or `token_later`: none
  // yet, SetSandboxToken gives it); returns the info with the token.
  Result<SandboxInfo> AddLocked(SandboxInfo info, const std::string& token_sha256,
                                bool token_later = false);

  FakeTemplates* const templates_;
  FakeWorkspaces* const workspaces_;
  mutable std::mutex mu_;
  int create_errors_left_ = 0;  // SetCreateError(s, count): failures still to come
  std::map<std::string, Sandbox> sandboxes_;
  uint64_t next_id_ = 1;
  uint32_t next_cid_ = 3;
  std::atomic<int> calls_{0};
};

}  // namespace kubicle::noderuntime::server::testing
