// The node daemon's service: what kubicle-node can do with templates,
// sandboxes and workspaces on this machine, as one interface per role.
// Each caller depends on the roles it uses (the HTTP server's handlers
// each on one; the node agent on templates, sandboxes, workspaces and
// tokens); SandboxManager (noderuntime/manager) implements them all as
// SandboxService over kubicle-vmm processes; noderuntime/server/testing
// has an in-memory fake per role for the server's and clients' tests.
//
// Contracts (every role):
//  - Every method is thread-safe and may be called concurrently; methods on
//    different sandboxes never wait for each other.
//  - Errors are Status codes the API maps to HTTP: InvalidArgument (400),
//    NotFound (404), AlreadyExists / FailedPrecondition (409),
//    ResourceExhausted (429: no capacity), DeadlineExceeded (504),
//    Unavailable (503), anything else 500. A failed call changes no state.
//  - The value types (ids, labels, selectors) are the data-plane
//    contract's: noderuntime/api/types.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "noderuntime/api/types.h"

namespace kubicle::noderuntime {

// Templates: baked once per node, restored by sandboxes and runs.
class TemplateService {
 public:
  virtual ~TemplateService() = default;

  // Starts baking (asynchronously) and returns at once with state kBaking.
  // AlreadyExists if a template of that name exists with another spec.
  virtual Result<TemplateInfo> PutTemplate(const TemplateSpec& spec) = 0;
  virtual Result<TemplateInfo> GetTemplate(const std::string& name) = 0;
  virtual std::vector<TemplateInfo> ListTemplates() = 0;
  // FailedPrecondition while sandboxes of the template run.
  virtual Status DeleteTemplate(const std::string& name) = 0;
};

// Sandboxes: create (restore), fork, list, suspend/resume, delete.
class SandboxLifecycle {
 public:
  virtual ~SandboxLifecycle() = default;

  // Returns once the sandbox's agent answers (state kRunning). With
  // spec.workspace: NotFound for no such workspace, FailedPrecondition
  // when it is attached elsewhere or the template has no workspace slot.
  virtual Result<SandboxInfo> CreateSandbox(const SandboxSpec& spec) = 0;
  // A source with a workspace attached is refused (FailedPrecondition):
  // children would need copies of a disk the source keeps writing in place
  // (docs/workspaces.md, "Forks").
  virtual Result<std::vector<SandboxInfo>> ForkSandbox(const ForkRequest& request) = 0;
  virtual Result<SandboxInfo> GetSandbox(const std::string& id) = 0;
  // `selector` is a Kubernetes label selector; empty selects all.
  virtual Result<std::vector<SandboxInfo>> ListSandboxes(const std::string& selector) = 0;
  // Returns once the VM is gone (its workspace, if any, flushed and
  // released). NotFound if there is no such sandbox.
  virtual Status DeleteSandbox(const std::string& id) = 0;
  // Suspend and resume (docs/node.md, "Suspend and resume"). Suspend
  // snapshots the VM (memory, devices, disks) into the sandbox's directory
  // and stops it: its RAM, vCPUs and cgroup are freed; its id, token, CID,
  // network namespace and TTL stay (the TTL keeps counting). Exec, files,
  // ports and stats of a Suspended sandbox are FailedPrecondition. Resume
  // runs it again on this node from that snapshot (processes, memory and
  // files as they were) and removes the snapshot. Both are idempotent (a
  // Suspended sandbox suspends Ok, a Running one resumes Ok) and return the
  // sandbox; FailedPrecondition from any other state; ResourceExhausted when
  // the node's suspend disk budget (suspend) or its memory and vCPUs
  // (resume) cannot take it. A failed call leaves the sandbox as it was.
  virtual Result<SandboxInfo> SuspendSandbox(const std::string& id) = 0;
  virtual Result<SandboxInfo> ResumeSandbox(const std::string& id) = 0;
  // Deletes every sandbox the selector matches; returns their ids.
  virtual Result<std::vector<std::string>> DeleteSandboxes(const std::string& selector) = 0;
};

// A running sandbox's guest: exec, files, console, stats and ports.
class GuestIo {
 public:
  virtual ~GuestIo() = default;

  virtual Result<guest::client::ExecResult> Exec(const std::string& id,
                                                 const ExecOptions& options) = 0;
  virtual Status WriteFile(const std::string& id, const std::string& path,
                           guest::protocol::ByteSpan data, uint32_t mode) = 0;
  // The whole file in memory; a file above the node's in-memory read limit
  // (64 MiB by default) is ResourceExhausted: use ReadFileStream.
  virtual Result<guest::protocol::Bytes> ReadFile(const std::string& id,
                                                  const std::string& path) = 0;
  // Streams the file to on_chunk in order, in chunks of at most 64 KiB; on
  // success on_chunk ran at least once (an empty file: one empty chunk) and
  // its first call carries file_size. An error found before any data (no
  // such sandbox or file, a directory) is returned with no call made, so
  // the caller can still answer it as a plain error. An error returned by
  // on_chunk stops the read and is returned. Backpressure as for streamed
  // exec output: on_chunk may block on a slow client, not forever.
  virtual Status ReadFileStream(const std::string& id, const std::string& path,
                                const guest::client::FileChunkFn& on_chunk) = 0;

  // Up to `max_bytes` of the console log from `offset` (see ConsoleRead).
  // NotFound for no such sandbox; a sandbox whose VM has not written yet
  // reads as empty.
  virtual Result<ConsoleRead> ReadConsole(const std::string& id, uint64_t offset,
                                          size_t max_bytes) = 0;
  // FailedPrecondition unless the sandbox is Running.
  virtual Result<SandboxStats> GetSandboxStats(const std::string& id) = 0;

  // The guest's files beyond read and write, through the agent (STAT,
  // LIST, REMOVE): NotFound for a missing path. ListFiles gives the entries
  // of a directory (FailedPrecondition for a file); RemoveFile removes a
  // file, an empty directory, or with `recursive` a whole tree.
  virtual Result<guest::protocol::StatReply> StatFile(const std::string& id,
                                                      const std::string& path) = 0;
  virtual Result<std::vector<guest::protocol::DirEntry>> ListFiles(const std::string& id,
                                                                   const std::string& path) = 0;
  virtual Status RemoveFile(const std::string& id, const std::string& path, bool recursive) = 0;

  // A TCP connection to `port` (1..65535) of the sandbox's guest, made
  // inside the sandbox's network namespace (network/netns_connect.h), for
  // the data plane's port streams (docs/api.md, "Ports"). NotFound for no
  // such sandbox; FailedPrecondition unless it is Running with a network;
  // Unavailable when nothing listens there; DeadlineExceeded when the
  // guest does not answer within 10 s.
  virtual Result<UniqueFd> ConnectGuestPort(const std::string& id, uint16_t port) = 0;
};

// Per-call runs (docs/node.md, "Per-call runs").
class RunService {
 public:
  virtual ~RunService() = default;

  // Per-call runs. Run returns once the command has ended; the VM is torn
  // down after, off the caller's path. NotFound for no such template,
  // FailedPrecondition when it is not Ready here, ResourceExhausted when
  // the node is full.
  virtual Result<RunResult> Run(const RunOptions& options) = 0;
};

// Workspaces (docs/workspaces.md) and their files without a VM.
class WorkspaceService {
 public:
  virtual ~WorkspaceService() = default;

  // Creates the workspace (a fresh, empty ext4 of size_mib) or returns the
  // existing one: idempotent for the same name and size (token_sha256 and
  // labels of an existing one are kept; a repeated put returns no token).
  // Another size is FailedPrecondition (workspaces do not grow yet).
  // InvalidArgument for a bad name, size or hash; ResourceExhausted when
  // the node's workspace budget (NodeConfig::workspace_budget_mib: the sum
  // of every workspace's size) or the file system's free space would be
  // exceeded. Returns once the image is made (state kReady).
  virtual Result<WorkspaceInfo> PutWorkspace(const WorkspaceSpec& spec) = 0;
  virtual Result<WorkspaceInfo> GetWorkspace(const std::string& name) = 0;
  virtual std::vector<WorkspaceInfo> ListWorkspaces() = 0;
  // Removes the workspace and its disk file. FailedPrecondition while a
  // sandbox or run has it attached (naming the holder); NotFound if absent.
  virtual Status DeleteWorkspace(const std::string& name) = 0;

  // The workspace's files without a VM, through the confined helper. Paths
  // are absolute inside the workspace's file system ("/" is its root; no
  // "." or ".." components; at most kMaxWorkspacePathBytes). Every call is
  // FailedPrecondition while a VM has the workspace attached (one writer:
  // the guest's kernel caches the file system, so the host may neither
  // write under it nor trust what it reads), NotFound for a missing path
  // or workspace, DataLoss when the image is corrupt (the helper refused
  // it), DeadlineExceeded when the helper ran past its deadline.
  //
  // Streams the file to on_chunk in chunks of at most 64 KiB, as
  // ReadFileStream does (first call carries file_size; an error before any
  // data is returned with no call made).
  virtual Status ReadWorkspaceFile(const std::string& name, const std::string& path,
                                   const guest::client::FileChunkFn& on_chunk) = 0;
  // Creates or truncates the file (parents made as with mkdir -p, 0755),
  // at most kMaxWorkspaceWriteBytes; ResourceExhausted when the file
  // system is full.
  virtual Status WriteWorkspaceFile(const std::string& name, const std::string& path,
                                    guest::protocol::ByteSpan data, uint32_t mode) = 0;
  virtual Result<guest::protocol::StatReply> StatWorkspaceFile(const std::string& name,
                                                               const std::string& path) = 0;
  // The entries of a directory (no "." or ".."; FailedPrecondition for a
  // file); ResourceExhausted beyond kMaxWorkspaceListEntries.
  virtual Result<std::vector<guest::protocol::DirEntry>> ListWorkspaceFiles(
      const std::string& name, const std::string& path) = 0;
  // A file, an empty directory, or with `recursive` a whole tree.
  virtual Status RemoveWorkspaceFile(const std::string& name, const std::string& path,
                                     bool recursive) = 0;
};

// The data-plane tokens the server checks (and the run tokens the node
// agent sets): one per sandbox, per workspace, per template's runs.
class TokenService {
 public:
  virtual ~TokenService() = default;

  // True if `token` is the sandbox's data-plane token (constant-time compare).
  // False for every token while a sandbox made with token_later has none.
  virtual bool CheckToken(const std::string& id, const std::string& token) = 0;
  // Gives a sandbox made with SandboxSpec::token_later the hex SHA-256 of
  // its token (persisted with its record). OK when it already has this
  // hash; FailedPrecondition when it has another (a token never changes),
  // NotFound for no such sandbox, InvalidArgument for a hash that is not
  // 64 lowercase hex.
  virtual Status SetSandboxToken(const std::string& id, const std::string& token_sha256) = 0;
  // Sets the hex SHA-256 of the template's run token (the node agent takes
  // it from SandboxTemplate status.runTokenSha256); empty clears it. Kept in
  // memory only: the node agent sets it again after a restart. NotFound for
  // no such template, InvalidArgument for a hash that is not 64 lowercase hex.
  virtual Status SetRunToken(const std::string& template_name, const std::string& token_sha256) = 0;
  // True if `token` is the template's run token (constant-time compare);
  // false when none is set.
  virtual bool CheckRunToken(const std::string& template_name, const std::string& token) = 0;
  // True if `token` is the workspace's data-plane token (constant-time).
  virtual bool CheckWorkspaceToken(const std::string& name, const std::string& token) = 0;
};

// Everything the node offers: what SandboxManager implements and the
// daemon serves. Callers that need one role take that role.
class SandboxService : public TemplateService,
                       public SandboxLifecycle,
                       public GuestIo,
                       public RunService,
                       public WorkspaceService,
                       public TokenService {};

}  // namespace kubicle::noderuntime
