// The kubicle-vmm control protocol: the typed requests and replies of every
// command of the VMM's control socket, their wire encoding, and the one rule
// for guest vsock CIDs. The server (ControlServer, vm*.cc) and every client
// (ControlClient: the node runtime, the test harness, benchmarks) use these
// types; nothing else builds or parses control JSON.
//
// Wire format (docs/vmm.md, "Control socket"): one JSON object per line.
// A request is {"cmd": NAME, "v": VERSION, ...fields}; a reply is
// {"ok": true, "v": VERSION, ...fields} or {"ok": false, "v": VERSION,
// "error": TEXT}.
//
// Version rule: kProtocolVersion is bumped only by a change an older peer
// would misread (a field changes meaning or type, a field becomes required,
// a new value of an enumerated field). Additive changes — a new optional
// field, a new command — keep the version: unknown fields are ignored by
// both sides and an unknown command gets an error reply. A request without
// "v" is version 1 (clients older than the field); the server refuses a
// request whose version is newer than its own. Replies from servers older
// than the field carry no "v" and are read as version 1.
//
// Contracts:
// - Decoding never throws and never trusts: sizes are checked before the
//   text is parsed (kMaxRequestBytes, kMaxReplyBytes), then nesting depth,
//   types, ranges and counts; every error is a Status naming the command and
//   the field (InvalidArgument for a request, DataLoss for a reply).
// - Encoding validates the same rules first (a client cannot send what the
//   server would refuse) and never throws either (invalid UTF-8 is refused).
// - Decode(Encode(x)) == x for every valid x.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "vmm/devices/virtio/vsock_cid.h"

namespace kubicle::vmm::control {

inline constexpr int kProtocolVersion = 1;
// A request line (without its newline) longer than this closes the connection.
inline constexpr size_t kMaxRequestBytes = 64 * 1024;
// A reply line longer than this is refused by ControlClient.
inline constexpr size_t kMaxReplyBytes = 1 << 20;
// Any string field (paths, ids).
inline constexpr size_t kMaxStringBytes = 4096;
inline constexpr size_t kMaxForkChildren = 64;
// JSON nesting deeper than this is refused before it is walked.
inline constexpr int kMaxDepth = 8;

// The one CID rule (the vsock device's: 0-2 are reserved, 2^32-1 is
// VMADDR_CID_ANY). Used by the command line, the control protocol and the
// vsock device alike.
using devices::virtio::kMaxGuestCid;
using devices::virtio::kMinGuestCid;
using devices::virtio::ValidCid;
// InvalidArgument "<what>: guest CIDs are 3..4294967294 ..." unless ValidCid.
Status CheckCid(uint64_t cid, std::string_view what);

// ---- requests ----
struct StatusRequest {
  bool operator==(const StatusRequest&) const = default;
};
struct PauseRequest {
  bool operator==(const PauseRequest&) const = default;
};
struct ResumeRequest {
  bool operator==(const ResumeRequest&) const = default;
};
// Pauses, writes a snapshot directory at dir (which must not exist), resumes
// if resume is set.
struct SnapshotRequest {
  std::string dir;
  bool resume = true;
  bool operator==(const SnapshotRequest&) const = default;
};
// A clone's own network attachment (docs/vmm.md, "Network"): the TAP named
// `tap` in the network namespace whose file is `netns` (empty: the VMM's
// own namespace), and the MAC the guest's NIC takes. The node creates the
// namespace and the TAP; the VMM only attaches to it.
struct NetAttachment {
  std::string tap;    // 1..15 bytes, no '/', ':' or whitespace (an interface name)
  std::string mac;    // "aa:bb:cc:dd:ee:ff", unicast and not zero
  std::string netns;  // an absolute path, or empty
  bool operator==(const NetAttachment&) const = default;
};

// An interface name as the kernel accepts one (dev_valid_name): 1..15
// bytes, not "." or "..", no '/', ':' or whitespace. Used by --net too.
bool ValidInterfaceName(std::string_view name);

// Pool VMs only: restores the snapshot at `snapshot` and runs it. Fields left
// unset keep the pool process's command-line values.
struct RestoreRequest {
  std::string snapshot;
  std::optional<std::string> vsock_uds;
  std::optional<std::string> serial;
  std::optional<std::string> id;
  std::optional<std::string> layer_dir;
  std::optional<uint64_t> cid;
  // Required when the snapshot has a network device, refused otherwise.
  std::optional<NetAttachment> net;
  // A workspace (docs/workspaces.md): the absolute path of a raw disk image
  // that becomes the backend of the snapshot's workspace slot (the
  // virtio-blk device `--workspace-slot` baked in, serial "workspace"),
  // opened read-write in place; the device re-reads its capacity and
  // raises a config-change interrupt. Refused when the snapshot has no
  // slot. Unset: the slot stays an empty disk (capacity 0).
  std::optional<std::string> workspace;
  bool operator==(const RestoreRequest&) const = default;
};
// The new identity of one fork child.
struct ForkChild {
  std::string control;    // required: the child's control socket
  uint64_t cid = 0;       // required: ValidCid
  std::string vsock_uds;  // required when the VM has a vsock device
  std::string serial;     // empty: discarded
  std::string layer_dir;  // empty: the parent's --layer-dir
  // Required when the VM has a network device (one TAP takes one VMM),
  // refused otherwise.
  std::optional<NetAttachment> net;
  bool operator==(const ForkChild&) const = default;
};
// Pauses, captures once, fork(2)s one copy-on-write child per entry, resumes.
struct ForkRequest {
  std::vector<ForkChild> children;  // 1..kMaxForkChildren
  bool operator==(const ForkRequest&) const = default;
};
struct ShutdownRequest {
  bool operator==(const ShutdownRequest&) const = default;
};

using Request = std::variant<StatusRequest, PauseRequest, ResumeRequest, SnapshotRequest,
                             RestoreRequest, ForkRequest, ShutdownRequest>;

// The wire name of a request ("status", "fork", ...).
std::string_view CommandName(const Request& request);

// ---- replies ----
enum class VmState { kPooled, kRunning, kPaused };
std::string_view VmStateName(VmState state);

// One range of guest RAM and where it is mapped in the VMM (so tools can
// tell VMM overhead from guest pages).
struct GuestMemoryRange {
  uint64_t guest = 0;
  uint64_t host = 0;
  uint64_t size = 0;
  bool operator==(const GuestMemoryRange&) const = default;
};

// The reply to status, pause and resume, and the first part of the others'.
struct VmStatus {
  std::string id;
  VmState state = VmState::kRunning;
  int vcpus = 0;
  uint64_t mem_bytes = 0;
  uint64_t guest_cid = 0;
  int64_t pid = 0;
  int64_t uptime_ms = 0;
  std::vector<GuestMemoryRange> guest_memory;
  bool operator==(const VmStatus&) const = default;
};
struct SnapshotReply {
  VmStatus status;
  std::string dir;
  bool operator==(const SnapshotReply&) const = default;
};
struct RestoreReply {
  VmStatus status;
  int64_t restore_us = 0;
  bool operator==(const RestoreReply&) const = default;
};
struct ForkReply {
  VmStatus status;
  std::vector<int64_t> pids;  // one per child, in request order
  int64_t fork_us = 0;
  bool operator==(const ForkReply&) const = default;
};
struct ShutdownReply {
  bool operator==(const ShutdownReply&) const = default;
};

using Reply = std::variant<VmStatus, SnapshotReply, RestoreReply, ForkReply, ShutdownReply>;

// The reply type of each request type.
template <typename Req> struct ReplyOf;
template <> struct ReplyOf<StatusRequest> { using type = VmStatus; };
template <> struct ReplyOf<PauseRequest> { using type = VmStatus; };
template <> struct ReplyOf<ResumeRequest> { using type = VmStatus; };
template <> struct ReplyOf<SnapshotRequest> { using type = SnapshotReply; };
template <> struct ReplyOf<RestoreRequest> { using type = RestoreReply; };
template <> struct ReplyOf<ForkRequest> { using type = ForkReply; };
template <> struct ReplyOf<ShutdownRequest> { using type = ShutdownReply; };

// ---- encoding ----
// The request checked against the protocol's rules (what Decode enforces).
Status ValidateRequest(const Request& request);
// One line, without the newline.
Result<std::string> EncodeRequest(const Request& request);
Result<Request> DecodeRequest(std::string_view line);

// One line, without the newline. A reply is produced by the server, so it is
// not validated beyond what JSON needs.
std::string EncodeReply(const Reply& reply);
// An error reply carrying text (the server sends Status::ToString() of a
// failed command, the bare message of a request it could not decode).
std::string EncodeError(std::string_view text);
// The reply to a request of type Req: its typed fields, or, for an
// {"ok": false} reply, FailedPrecondition "kubicle-vmm <cmd>: <error>".
template <typename Req>
Result<typename ReplyOf<Req>::type> DecodeReply(std::string_view line);

}  // namespace kubicle::vmm::control
