// The messages between kubicle-node and kubicle-ext4, the confined helper
// that reads and writes a workspace's ext4 image (docs/workspaces.md,
// "The helper"). Both ends speak over one stream socket:
//
//   request  := u32le length (1..kMaxRequestHeader) + JSON header
//               {"op": "read"|"write"|"stat"|"list"|"remove", "path",
//                "mode"?, "recursive"?, "size"? (write: the data's length)}
//               then, for write, exactly `size` raw bytes (<= kMaxWriteBytes)
//   reply    := frames, each u8 type + u32le length + payload:
//               'D' raw file data (<= kMaxDataFrame), read only
//               'J' a JSON object (<= kMaxJsonFrame): {"size"} first for a
//                   read, {"entries": [..]} batches for a list, and last
//                   {"ok": true, "stat"?: {..}} or {"error": {"code",
//                   "message"}}
//
// Contract: every length is checked against its limit before the bytes it
// announces are read, on both sides. The node treats everything the helper
// says as hostile (the helper parses a guest-written file system): a frame
// over its limit, a malformed JSON object, a reply without its final frame
// or a helper that dies are DataLoss, never a crash or an unbounded read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "guest/protocol/messages.h"

namespace kubicle::noderuntime::ext4 {

inline constexpr uint32_t kMaxRequestHeader = 8192;
inline constexpr uint64_t kMaxWriteBytes = uint64_t{64} << 20;
inline constexpr uint32_t kMaxDataFrame = 64 * 1024;
inline constexpr uint32_t kMaxJsonFrame = 1 << 20;
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr size_t kListBatch = 512;

enum class Op { kRead, kWrite, kStat, kList, kRemove };
const char* OpName(Op op);

struct Request {
  Op op = Op::kStat;
  std::string path;
  uint32_t mode = 0644;
  bool recursive = false;
  uint64_t size = 0;  // write: the data's length
  bool operator==(const Request&) const = default;
};

// InvalidArgument unless `path` is absolute, at most kMaxPathBytes, with no
// empty, "." or ".." component and no NUL ("/" is the root).
Status CheckPath(const std::string& path);
// The components of a checked path ("/" has none).
std::vector<std::string> Components(const std::string& path);

// The header frame (length prefix included).
Result<std::string> EncodeRequest(const Request& r);
// The JSON after the length prefix.
Result<Request> DecodeRequest(std::string_view json);

// Status <-> the "error" object of a final frame.
std::string EncodeError(const Status& s);
std::string EncodeFrameHeader(char type, uint32_t length);

}  // namespace kubicle::noderuntime::ext4
