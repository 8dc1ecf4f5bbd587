// The node's vocabulary: the value types its data-plane API carries
// (templates, sandboxes, forks, execs, runs, console, stats, workspaces)
// and the names of their states. The contract library (kubicle_node_api:
// these types, codec.h, routes.h) is below both the node's client and its
// server, so a client (nodectl, kubectl-kubicle, benches) links no server
// or runtime code.
//
// These types stay in namespace kubicle::noderuntime, not ::api: they are
// also the words of the runtime's service interface (sandbox_service.h),
// which names them everywhere unqualified; the folder is their home, the
// namespace is the node's.
//
// Ids are DNS-1123 labels (lowercase alphanumerics and '-', ≤ 63 chars).
// Label keys and values follow Kubernetes' syntax; selectors are
// Kubernetes label selectors ("kubicle.dev/run=r1,tier in (a,b)").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
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
  // minted. Empty: the node mints one and returns it once (unless
  // token_later).
  std::string token_sha256;
  // In-process only (the node agent; the HTTP API never sets it): with an
  // empty token_sha256, no token is minted and none opens the data plane
  // until TokenService::SetSandboxToken gives the hash. So the VM restores
  // while the operator is still publishing status.tokenSha256, and no
  // command runs in it before the token is known.
  bool token_later = false;
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

// The states as the API spells them ("Baking", "Running", ...).
const char* TemplateStateName(TemplateState s);
const char* SandboxStateName(SandboxState s);
const char* WorkspaceStateName(WorkspaceState s);

}  // namespace kubicle::noderuntime
