// The node daemon's service interface: what kubicle-node can do with
// templates and sandboxes on this machine. The HTTP API (noderuntime/api)
// and, later, the Kubernetes node agent call it; SandboxManager
// (noderuntime/sandbox_manager.h) implements it over kubicle-vmm processes;
// FakeSandboxService implements it in memory for the API's unit tests.
//
// Contracts:
//  - Every method is thread-safe and may be called concurrently; methods on
//    different sandboxes never wait for each other.
//  - Errors are Status codes the API maps to HTTP: InvalidArgument (400),
//    NotFound (404), AlreadyExists / FailedPrecondition (409),
//    ResourceExhausted (429: no capacity), DeadlineExceeded (504),
//    Unavailable (503), anything else 500. A failed call changes no state.
//  - Ids are DNS-1123 labels (lowercase alphanumerics and '-', ≤ 63 chars).
//    Label keys and values follow Kubernetes' syntax; selectors are
//    Kubernetes label selectors ("kubicle.dev/run=r1,tier in (a,b)").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "guest/client/agent_client.h"
#include "guest/protocol/messages.h"
#include "noderuntime/network/egress_policy.h"

namespace kubicle::noderuntime {

using Labels = std::map<std::string, std::string>;
// A sandbox's environment: applied to every exec (an exec's own env wins).
using Env = std::map<std::string, std::string>;
using WallTime = std::chrono::system_clock::time_point;

// How a template's VM is built: cold boot from these images, then the
// warm-up commands through the agent, then a snapshot.
struct TemplateSpec {
  std::string name;
  std::string kernel;                 // vmlinux / bzImage / test guest ELF
  std::string initrd;                 // optional
  std::string cmdline;                // optional extra kernel command line
  std::vector<std::string> disks;     // "path" or "path,ro"; the rootfs first
  uint64_t mem_mib = 256;
  uint32_t vcpus = 1;
  std::vector<std::string> warmup;    // shell commands, run in order
  // The egress of its sandboxes that name none and of every per-call run
  // (SandboxTemplate spec.network; docs/network.md); default: internet.
  // The bake's own warm-up has the default, so it may fetch packages.
  network::EgressPolicy network;
};

enum class TemplateState { kBaking, kReady, kFailed };

struct TemplateInfo {
  TemplateSpec spec;
  TemplateState state = TemplateState::kBaking;
  std::string message;                // what failed, or the bake's progress
  std::string digest;                 // "sha256:<hex>" of the snapshot's state+memory
  std::string snapshot_dir;
  // The snapshot has a network device (baked with the node's sandbox
  // network on): every sandbox of it needs a namespace, and gets one.
  bool nic = false;
  // The snapshot has a workspace slot (kubicle-vmm --workspace-slot): its
  // sandboxes and runs may attach a workspace. Every bake since workspaces
  // has one; older templates do not.
  bool workspace_slot = false;
  double bake_seconds = 0;
  WallTime ready_at{};
};

struct SandboxSpec {
  std::string id;                     // empty: the node picks one
  std::string template_name;
  Labels labels;
  std::optional<int64_t> ttl_seconds; // node-side backstop; unset = no TTL
  std::string hostname;               // empty: the id
  Env env;
  // Set: clients authenticate with the token whose hex SHA-256 this is (the
  // node agent takes it from Sandbox status.tokenSha256) and no token is
  // minted. Empty: the node mints one and returns it once.
  std::string token_sha256;
  // spec.network's egress policy (docs/network.md); unset: the template's.
  std::optional<network::EgressPolicy> network;
  // ---- workspaces ----
  // The name of a Workspace of this node to attach (mounted at /workspace
  // in a Linux guest); empty: none. One writer at a time: a workspace
  // attached elsewhere makes the create FailedPrecondition naming the
  // holder. Attached from the restore until the sandbox is deleted or its
  // VMM exits (a suspended sandbox keeps it attached).
  std::string workspace;
};

// kSuspended: the VM is stopped and its memory, devices and disks are a
// snapshot on the node's disk (docs/node.md, "Suspend and resume").
enum class SandboxState { kCreating, kRunning, kFailed, kDeleting, kSuspended };

// A sandbox's own network namespace (docs/network.md): set when its
// template has a network device.
struct SandboxNetworkInfo {
  std::string netns;               // the namespace's file
  uint32_t slot = 0;               // its slot of the node's sandbox CIDR
  std::string mac;                 // the guest NIC's, "02:..:..", fresh per clone
  network::EgressPolicy policy;
  bool operator==(const SandboxNetworkInfo&) const = default;
};

struct SandboxInfo {
  std::string id;
  std::string template_name;
  Labels labels;
  SandboxState state = SandboxState::kCreating;
  std::string message;                // why it failed
  std::string fork_of;                // source sandbox of a fork
  Env env;
  WallTime created_at{};
  std::optional<WallTime> expires_at;
  uint32_t cid = 0;
  int vmm_pid = 0;
  double ready_ms = 0;                // create (restore or fork) to agent answering
  uint64_t mem_mib = 0;
  uint32_t vcpus = 0;
  std::optional<SandboxNetworkInfo> network;
  // Set while kSuspended: when, and the node disk its memory snapshot takes.
  std::optional<WallTime> suspended_at;
  uint64_t suspended_bytes = 0;
  std::string token;                  // data-plane token; returned only by Create/Fork
  std::string workspace;              // the attached workspace's name, or empty
};

// One child of a fork whose identity the caller chooses (the node agent:
// one Sandbox object per child).
struct ForkChildSpec {
  std::string id;
  std::string token_sha256;           // as in SandboxSpec
  Labels labels;                      // added to the request's labels
  Env env;                            // empty: the source's
  std::optional<network::EgressPolicy> network;  // unset: the source's
};

struct ForkRequest {
  std::string source_id;
  uint32_t count = 1;                 // 1..64; ignored when `children` is set
  Labels labels;                      // added to the source's labels
  std::optional<int64_t> ttl_seconds;
  std::vector<ForkChildSpec> children;  // set: exactly these children
};

// Collected output is capped per stream on the host (16 MiB by default):
// beyond it the rest is drained and ExecResult::truncated is set. Streamed
// output (io.on_output) is backpressure: the guest is not read for this exec
// while on_output runs, but other calls on the same sandbox read for it and
// queue its frames (4 MiB); if on_output then takes nothing for 10 s the
// exec fails ResourceExhausted and its process is killed. So on_output may
// block on a slow client, not forever.
struct ExecOptions {
  guest::protocol::ExecStartRequest request;
  guest::client::ExecIo io;           // on_output streams; unset collects
  std::chrono::milliseconds timeout{60000};
};

// A per-call run (docs/node.md, "Per-call runs"): a VM restored from the
// template for one command and discarded after it. The VM is never a
// sandbox: it has no record, no token, is not listed, and a node restart
// mid-call kills it as an orphan instead of re-adopting it.
struct RunOptions {
  std::string template_name;
  // The command, as for Exec; exec.timeout bounds the command alone (the
  // restore is bounded by the node's agent timeout).
  ExecOptions exec;
  // A workspace to attach for the call (as SandboxSpec::workspace): held by
  // the run from restore until its VM has been flushed and stopped, then
  // released before Run returns, so the caller may read its files at once.
  std::string workspace;
  // No network field: a run's egress is its template's (TemplateSpec::
  // network), so the token that may run a template cannot widen it.
};

struct RunTimings {
  double restore_ms = 0;  // call start to the agent answering in the new VM
  double exec_ms = 0;     // the command through the agent
  double total_ms = 0;    // call start to the command's end (teardown is after)
};

struct RunResult {
  guest::client::ExecResult exec;
  RunTimings timings;
};

// A piece of a sandbox's serial console: the log kubicle-vmm writes
// (<sandbox>/serial.log), bounded on disk by the VMM's --serial-* limits
// (rotated at NodeConfig::console.max_file_bytes), so a read is bounded too.
struct ConsoleRead {
  guest::protocol::Bytes data;  // from `offset`, at most the asked bytes
  uint64_t offset = 0;          // where `data` starts: the asked offset, or 0
                                // when the log was rotated below it
  uint64_t size = 0;            // the log's size when read
  bool running = false;         // the VM runs: more may come
};

// What a sandbox's VM uses now, read from its cgroup (the VMM and its
// helpers) or, without cgroups, from /proc of the VMM process.
struct SandboxStats {
  uint64_t cpu_usage_ns = 0;        // CPU time used since the VM started
  uint64_t memory_bytes = 0;        // resident memory (cgroup usage or VmRSS)
  uint64_t memory_limit_bytes = 0;  // the cgroup's limit; 0 when none
  uint64_t pids = 0;                // processes in the group
  uint64_t mem_mib = 0;             // the guest's RAM
  uint32_t vcpus = 0;
  std::string source;               // "cgroup" or "proc"
};

// ---- workspaces (docs/workspaces.md) ----
// A Workspace is a durable ext4 disk on this node that outlives every
// sandbox using it: <state_dir>/workspaces/<name>/disk.img, a sparse raw
// image made by mke2fs. The host never mounts it: its files are read and
// written without a VM by a confined helper (kubicle-ext4, libext2fs) that
// treats the image as hostile.
struct WorkspaceSpec {
  std::string name;                   // DNS-1123 label
  uint64_t size_mib = 0;              // kMinWorkspaceMiB..kMaxWorkspaceMiB
  // As SandboxSpec::token_sha256: set, clients use the token whose hex
  // SHA-256 this is (the node agent takes it from Workspace status);
  // empty, the node mints one and PutWorkspace returns it once.
  std::string token_sha256;
  Labels labels;
};

inline constexpr uint64_t kMinWorkspaceMiB = 8;
inline constexpr uint64_t kMaxWorkspaceMiB = uint64_t{1} << 20;  // 1 TiB

enum class WorkspaceState { kReady, kFailed };

struct WorkspaceInfo {
  std::string name;
  uint64_t size_mib = 0;
  std::string filesystem = "ext4";
  Labels labels;
  WorkspaceState state = WorkspaceState::kReady;
  std::string message;                // why it failed
  // The sandbox id (or "run-<hex>" for a per-call run) that has it
  // attached read-write; empty when detached.
  std::string attached_to;
  uint64_t bytes_used = 0;            // host disk the sparse image takes now
  WallTime created_at{};
  std::string token;                  // returned only by the PutWorkspace that minted it
};

// Caps of the host-side file calls (each enforced before bytes are moved).
inline constexpr uint64_t kMaxWorkspaceWriteBytes = uint64_t{64} << 20;
inline constexpr size_t kMaxWorkspaceListEntries = 100000;
inline constexpr size_t kMaxWorkspacePathBytes = 4096;

class SandboxService {
 public:
  virtual ~SandboxService() = default;

  // Starts baking (asynchronously) and returns at once with state kBaking.
  // AlreadyExists if a template of that name exists with another spec.
  virtual Result<TemplateInfo> PutTemplate(const TemplateSpec& spec) = 0;
  virtual Result<TemplateInfo> GetTemplate(const std::string& name) = 0;
  virtual std::vector<TemplateInfo> ListTemplates() = 0;
  // FailedPrecondition while sandboxes of the template run.
  virtual Status DeleteTemplate(const std::string& name) = 0;

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
  // True if `token` is the sandbox's data-plane token (constant-time compare).
  virtual bool CheckToken(const std::string& id, const std::string& token) = 0;

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
  // Per-call runs. Run returns once the command has ended; the VM is torn
  // down after, off the caller's path. NotFound for no such template,
  // FailedPrecondition when it is not Ready here, ResourceExhausted when
  // the node is full.
  virtual Result<RunResult> Run(const RunOptions& options) = 0;
  // Sets the hex SHA-256 of the template's run token (the node agent takes
  // it from SandboxTemplate status.runTokenSha256); empty clears it. Kept in
  // memory only: the node agent sets it again after a restart. NotFound for
  // no such template, InvalidArgument for a hash that is not 64 lowercase hex.
  virtual Status SetRunToken(const std::string& template_name, const std::string& token_sha256) = 0;
  // True if `token` is the template's run token (constant-time compare);
  // false when none is set.
  virtual bool CheckRunToken(const std::string& template_name, const std::string& token) = 0;

  // ---- workspaces ----
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
  // True if `token` is the workspace's data-plane token (constant-time).
  virtual bool CheckWorkspaceToken(const std::string& name, const std::string& token) = 0;

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

const char* TemplateStateName(TemplateState s);
const char* SandboxStateName(SandboxState s);
const char* WorkspaceStateName(WorkspaceState s);

}  // namespace kubicle::noderuntime
