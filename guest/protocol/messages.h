// Host-side C++ codec for every agent protocol message (see
// docs/agent-protocol.md for the bytes). Used by the host AgentClient, the
// Linux guest agent and tests.
//
// Each message struct has `kType`, `Encode()` (payload bytes) and a static
// `Decode(payload)` that validates everything: required fields, fixed widths,
// string limits and cross-field rules, returning InvalidArgument with a
// precise message otherwise. Unknown tags are skipped. Structs that are
// requests and replies of the same type are distinguished by the frame's
// kFlagReply, not by the payload.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/wire.h"

namespace kubicle::guest::protocol {

using Bytes = std::vector<uint8_t>;
using ByteSpan = std::span<const uint8_t>;

// Builds a frame carrying `msg`. Replies pass kFlagReply (and kFlagMore for
// all but the last frame of a stream).
template <typename M>
Frame MakeFrame(const M& msg, uint32_t id, uint32_t flags = 0) {
  Frame f;
  f.type = M::kType;
  f.id = id;
  f.flags = flags;
  f.payload = msg.Encode();
  return f;
}

// Paths are absolute, non-empty, at most kMaxPathLen bytes, without NUL.
Status ValidatePath(std::string_view path);

// ---- Connection ----

struct HelloRequest {
  static constexpr MsgType kType = MsgType::kHello;
  uint16_t min_version = kMinVersion;
  uint16_t max_version = kMaxVersion;
  std::string name;
  std::string software_version;
  std::vector<std::string> capabilities;
  uint32_t max_payload = kMaxPayload;  // the sender's receive limit
  Bytes Encode() const;
  static Result<HelloRequest> Decode(ByteSpan payload);
};

struct HelloReply {
  static constexpr MsgType kType = MsgType::kHello;
  uint16_t version = kVersion1;
  std::string name;
  std::string software_version;
  std::vector<std::string> capabilities;
  uint32_t max_payload = kMaxPayload;
  bool HasCapability(std::string_view cap) const;
  Bytes Encode() const;
  static Result<HelloReply> Decode(ByteSpan payload);
};

// Highest version in both [a_min, a_max] and [b_min, b_max], or 0 if none.
uint16_t NegotiateVersion(uint16_t a_min, uint16_t a_max, uint16_t b_min, uint16_t b_max);

struct PingRequest {
  static constexpr MsgType kType = MsgType::kPing;
  uint64_t nonce = 0;
  Bytes Encode() const;
  static Result<PingRequest> Decode(ByteSpan payload);
};

struct PongReply {
  static constexpr MsgType kType = MsgType::kPong;
  uint64_t nonce = 0;
  Bytes Encode() const;
  static Result<PongReply> Decode(ByteSpan payload);
};

struct EchoMessage {
  static constexpr MsgType kType = MsgType::kEcho;
  Bytes data;
  Bytes Encode() const;
  static Result<EchoMessage> Decode(ByteSpan payload);
};

struct ErrorReply {
  static constexpr MsgType kType = MsgType::kError;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  uint32_t errno_value = 0;  // 0 = none
  Bytes Encode() const;
  static Result<ErrorReply> Decode(ByteSpan payload);
  static ErrorReply FromStatus(const Status& s);
  // The agent's error as a Status (unknown codes become Internal).
  Status ToStatus() const;
};

// Replies without fields (MKDIR, REMOVE, CHMOD, EXEC_SIGNAL). Decode accepts
// and ignores any well-formed TLVs.
struct EmptyMessage {
  Bytes Encode() const { return {}; }
  static Result<EmptyMessage> Decode(ByteSpan payload);
};
// EmptyMessage bound to a type, for generic request/reply helpers.
template <MsgType T>
struct EmptyMessageReply : EmptyMessage {
  static constexpr MsgType kType = T;
  static Result<EmptyMessageReply> Decode(ByteSpan payload) {
    auto r = EmptyMessage::Decode(payload);
    if (!r.ok()) return r.status();
    return EmptyMessageReply{};
  }
};

// ---- Exec ----

struct ExecStartRequest {
  static constexpr MsgType kType = MsgType::kExecStart;
  std::vector<std::string> argv;  // exactly one of argv / shell_command
  std::string shell_command;
  std::vector<std::string> env;  // "KEY=VALUE"
  std::string cwd;
  Bytes stdin_data;  // inline stdin (exclusive with stdin_streamed)
  bool stdin_streamed = false;
  uint64_t timeout_ms = 0;    // 0 = none
  uint64_t output_limit = 0;  // 0 = agent default
  bool background = false;
  // Run as the agent itself (root), ignoring the image's Env, WorkingDir and
  // User (/.kubicle/image.json): the node's own system commands set it.
  bool as_agent = false;
  Bytes Encode() const;
  static Result<ExecStartRequest> Decode(ByteSpan payload);
};

struct ExecStartReply {
  static constexpr MsgType kType = MsgType::kExecStart;
  uint32_t pid = 0;
  Bytes Encode() const;
  static Result<ExecStartReply> Decode(ByteSpan payload);
};

// Host -> agent, id = the exec's id; the last chunk has no kFlagMore (EOF).
struct ExecStdinChunk {
  static constexpr MsgType kType = MsgType::kExecStdin;
  Bytes data;
  Bytes Encode() const;
  static Result<ExecStdinChunk> Decode(ByteSpan payload);
};

struct ExecOutputChunk {
  static constexpr MsgType kType = MsgType::kExecOutput;
  OutputStream stream = OutputStream::kStdout;
  Bytes data;
  Bytes Encode() const;
  static Result<ExecOutputChunk> Decode(ByteSpan payload);
};

struct ExecExitReply {
  static constexpr MsgType kType = MsgType::kExecExit;
  std::optional<int32_t> exit_code;  // exactly one of exit_code / signal
  std::optional<uint32_t> signal;
  bool timed_out = false;
  bool truncated = false;
  Bytes Encode() const;
  static Result<ExecExitReply> Decode(ByteSpan payload);
};

struct ExecSignalRequest {
  static constexpr MsgType kType = MsgType::kExecSignal;
  uint32_t exec_id = 0;
  uint32_t signal = 0;
  Bytes Encode() const;
  static Result<ExecSignalRequest> Decode(ByteSpan payload);
};

// ---- Files ----

// One frame of a FILE_WRITE stream. The first frame carries path (and mode,
// atomic); every frame carries offset == bytes sent before it.
struct FileWriteChunk {
  static constexpr MsgType kType = MsgType::kFileWrite;
  std::optional<std::string> path;
  uint32_t mode = 0644;
  bool atomic = false;
  uint64_t offset = 0;
  Bytes data;
  Bytes Encode() const;
  static Result<FileWriteChunk> Decode(ByteSpan payload);
};

struct FileWriteReply {
  static constexpr MsgType kType = MsgType::kFileWrite;
  uint64_t size = 0;
  Bytes Encode() const;
  static Result<FileWriteReply> Decode(ByteSpan payload);
};

struct FileReadRequest {
  static constexpr MsgType kType = MsgType::kFileRead;
  std::string path;
  uint64_t offset = 0;
  uint64_t length = 0;  // 0 = to the end
  Bytes Encode() const;
  static Result<FileReadRequest> Decode(ByteSpan payload);
};

struct FileReadChunk {
  static constexpr MsgType kType = MsgType::kFileRead;
  uint64_t offset = 0;
  Bytes data;
  std::optional<uint64_t> size;  // file size; in the first frame
  Bytes Encode() const;
  static Result<FileReadChunk> Decode(ByteSpan payload);
};

struct StatRequest {
  static constexpr MsgType kType = MsgType::kStat;
  std::string path;
  Bytes Encode() const;
  static Result<StatRequest> Decode(ByteSpan payload);
};

struct StatReply {
  static constexpr MsgType kType = MsgType::kStat;
  FileType type = FileType::kFile;
  uint64_t size = 0;
  uint32_t mode = 0;
  uint64_t mtime_ns = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  Bytes Encode() const;
  static Result<StatReply> Decode(ByteSpan payload);
};

struct DirEntry {
  std::string name;
  FileType type = FileType::kFile;
  uint64_t size = 0;
  uint32_t mode = 0;
  uint64_t mtime_ns = 0;
  bool operator==(const DirEntry&) const = default;
};

struct ListRequest {
  static constexpr MsgType kType = MsgType::kList;
  std::string path;
  Bytes Encode() const;
  static Result<ListRequest> Decode(ByteSpan payload);
};

// One frame of a LIST reply; large directories span several (kFlagMore).
struct ListReply {
  static constexpr MsgType kType = MsgType::kList;
  std::vector<DirEntry> entries;
  Bytes Encode() const;
  static Result<ListReply> Decode(ByteSpan payload);
};

struct MkdirRequest {
  static constexpr MsgType kType = MsgType::kMkdir;
  std::string path;
  uint32_t mode = 0755;
  bool parents = false;
  Bytes Encode() const;
  static Result<MkdirRequest> Decode(ByteSpan payload);
};

struct RemoveRequest {
  static constexpr MsgType kType = MsgType::kRemove;
  std::string path;
  bool recursive = false;
  Bytes Encode() const;
  static Result<RemoveRequest> Decode(ByteSpan payload);
};

struct ChmodRequest {
  static constexpr MsgType kType = MsgType::kChmod;
  std::string path;
  uint32_t mode = 0;
  Bytes Encode() const;
  static Result<ChmodRequest> Decode(ByteSpan payload);
};

// ---- Identity and clones ----

struct IdentityRequest {
  static constexpr MsgType kType = MsgType::kIdentity;
  Bytes Encode() const { return {}; }
  static Result<IdentityRequest> Decode(ByteSpan payload);
};

struct IdentityReply {
  static constexpr MsgType kType = MsgType::kIdentity;
  std::string hostname;
  uint64_t cid = 0;
  uint64_t generation = 0;
  Bytes boot_id;  // kBootIdLen bytes when present
  uint32_t cpus = 0;
  uint64_t memory_bytes = 0;
  uint64_t uptime_ns = 0;
  uint64_t wall_clock_ns = 0;  // last set by POST_RESTORE (0 = never)
  uint64_t entropy_digest = 0;
  std::string name;
  std::string software_version;
  Bytes Encode() const;
  static Result<IdentityReply> Decode(ByteSpan payload);
};

struct PostRestoreRequest {
  static constexpr MsgType kType = MsgType::kPostRestore;
  Bytes entropy_seed;
  uint64_t wall_clock_ns = 0;  // 0 = leave the clock alone
  std::string hostname;        // empty = keep
  uint64_t generation = 0;
  // The MAC the clone's NIC was given (a restore or fork gets a new one):
  // the agent sets it on its network interface. Empty = keep; else 6 bytes.
  Bytes nic_mac;
  Bytes Encode() const;
  static Result<PostRestoreRequest> Decode(ByteSpan payload);
};

struct PostRestoreReply {
  static constexpr MsgType kType = MsgType::kPostRestore;
  uint64_t generation = 0;
  Bytes Encode() const;
  static Result<PostRestoreReply> Decode(ByteSpan payload);
};

// Hostnames: 1..kMaxHostnameLen bytes of [A-Za-z0-9.-].
Status ValidateHostname(std::string_view name);

// ---- Test-guest extras ----

struct MemFillRequest {
  static constexpr MsgType kType = MsgType::kMemFill;
  uint64_t seed = 0;
  uint64_t size = 0;  // multiple of 8
  Bytes Encode() const;
  static Result<MemFillRequest> Decode(ByteSpan payload);
};

struct MemFillReply {
  static constexpr MsgType kType = MsgType::kMemFill;
  uint64_t size = 0;
  Bytes Encode() const;
  static Result<MemFillReply> Decode(ByteSpan payload);
};

struct MemChecksumRequest {
  static constexpr MsgType kType = MsgType::kMemChecksum;
  Bytes Encode() const { return {}; }
  static Result<MemChecksumRequest> Decode(ByteSpan payload);
};

struct MemChecksumReply {
  static constexpr MsgType kType = MsgType::kMemChecksum;
  uint64_t size = 0;
  uint64_t seed = 0;  // seed of the last fill
  uint64_t checksum = 0;
  Bytes Encode() const;
  static Result<MemChecksumReply> Decode(ByteSpan payload);
};

// The checksum MEM_CHECKSUM reports after MEM_FILL(seed, size).
uint64_t ExpectedMemChecksum(uint64_t seed, uint64_t size);

struct EntropyReadRequest {
  static constexpr MsgType kType = MsgType::kEntropyRead;
  uint32_t length = 0;  // 1..kMaxEntropyRead
  Bytes Encode() const;
  static Result<EntropyReadRequest> Decode(ByteSpan payload);
};

struct EntropyReadReply {
  static constexpr MsgType kType = MsgType::kEntropyRead;
  Bytes data;
  Bytes Encode() const;
  static Result<EntropyReadReply> Decode(ByteSpan payload);
};

// ---- Test-guest raw disks (messages_disk.cc) ----
//
// Disks are addressed by their position in the DISK_INFO list; data moves in
// whole 512-byte sectors, at most kMaxDiskSectors (one kMaxChunk) per frame.

struct DiskInfoRequest {
  static constexpr MsgType kType = MsgType::kDiskInfo;
  Bytes Encode() const { return {}; }
  static Result<DiskInfoRequest> Decode(ByteSpan payload);
};

struct DiskDescription {
  uint64_t capacity_sectors = 0;
  bool read_only = false;
  std::string id;  // the device's serial, <= kMaxDiskIdLen bytes (may be empty)
  bool operator==(const DiskDescription&) const = default;
};

struct DiskInfoReply {
  static constexpr MsgType kType = MsgType::kDiskInfo;
  std::vector<DiskDescription> disks;  // at most kMaxDisks
  Bytes Encode() const;
  static Result<DiskInfoReply> Decode(ByteSpan payload);
};

struct DiskReadRequest {
  static constexpr MsgType kType = MsgType::kDiskRead;
  uint32_t disk = 0;
  uint64_t sector = 0;
  uint32_t count = 0;  // sectors, 1..kMaxDiskSectors
  Bytes Encode() const;
  static Result<DiskReadRequest> Decode(ByteSpan payload);
};

struct DiskReadReply {
  static constexpr MsgType kType = MsgType::kDiskRead;
  Bytes data;  // whole sectors, 1..kMaxDiskSectors of them
  Bytes Encode() const;
  static Result<DiskReadReply> Decode(ByteSpan payload);
};

struct DiskWriteRequest {
  static constexpr MsgType kType = MsgType::kDiskWrite;
  uint32_t disk = 0;
  uint64_t sector = 0;
  Bytes data;          // whole sectors, at most kMaxDiskSectors; empty only with flush
  bool flush = false;  // flush the disk's write cache after writing
  Bytes Encode() const;
  static Result<DiskWriteRequest> Decode(ByteSpan payload);
};

struct DiskWriteReply {
  static constexpr MsgType kType = MsgType::kDiskWrite;
  uint32_t count = 0;  // sectors written
  Bytes Encode() const;
  static Result<DiskWriteReply> Decode(ByteSpan payload);
};

}  // namespace kubicle::guest::protocol
