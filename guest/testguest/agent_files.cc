// Agent: the RAM-backed file messages (FILE_WRITE, FILE_READ, STAT, LIST,
// REMOVE, CHMOD). See ramfs.h for the store's rules.
#include "guest/testguest/agent.h"
#include "guest/testguest/fields.h"
#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest {

using wire::ErrorCode;
using wire::Tag;

namespace {
constexpr const char* kBadPath =
    "invalid path for the test guest (absolute, at most 127 bytes, no empty, . or .. parts)";
}  // namespace

bool Agent::ReadPath(Fields& f, const char** path, uint32_t* len) {
  f.Require(f.Str(Tag::kPath, path, len, wire::kMaxPathLen), "missing required field path");
  if (f.ok() && !RamFs::ValidPath(*path, *len)) f.Fail(kBadPath);
  return f.ok();
}

void Agent::AbortWrite(Session* s, const wire::FrameHeader& h, ErrorCode code, const char* msg) {
  Session::WriteStream& ws = s->write_stream();
  if (ws.active && ws.id == h.id) {
    fs_.Release(ws.slot);
    ws.active = false;
  }
  if ((h.flags & wire::kFlagMore) != 0) {
    // Ignore the rest of this stream; the client stops at our ERROR.
    ws.StartDropping(h.id);
  }
  s->SendError(h.id, code, msg);
}

void Agent::RefuseWrite(Session* s, const wire::FrameHeader& h, ErrorCode code, const char* msg) {
  Session::WriteStream& ws = s->write_stream();
  if (ws.IsDropping(h.id)) {
    if ((h.flags & wire::kFlagMore) == 0) ws.StopDropping(h.id);
    return;
  }
  AbortWrite(s, h, code, msg);
}

bool Agent::OpenWrite(Session* s, const wire::FrameHeader& h, const char* path, uint32_t path_len,
                      uint32_t mode, uint64_t offset) {
  Session::WriteStream& ws = s->write_stream();
  if (ws.active) {
    // Another stream is open on this connection: refuse the new one only.
    if ((h.flags & wire::kFlagMore) != 0) ws.StartDropping(h.id);
    s->SendError(h.id, ErrorCode::kResourceExhausted,
                 "one file write at a time per connection in the test guest");
    return false;
  }
  const char* error = nullptr;
  ErrorCode code = ErrorCode::kInvalidArgument;
  if (path == nullptr) {
    code = ErrorCode::kFailedPrecondition;
    error = "no open write stream for this id (the first chunk carries the path)";
  } else if (mode > 07777) {
    error = "mode above 07777";
  } else if (!RamFs::ValidPath(path, path_len)) {
    error = kBadPath;
  } else if (offset != 0) {
    error = "first chunk must have offset 0";
  } else if (fs_.IsDir(path, path_len)) {
    code = ErrorCode::kFailedPrecondition;
    error = "path is a directory";
  }
  for (uint32_t i = 1; error == nullptr && i < path_len; ++i) {
    if (path[i] == '/' && fs_.Find(path, i) >= 0) {
      code = ErrorCode::kFailedPrecondition;
      error = "a parent of path is a file";
    }
  }
  const int slot = error == nullptr ? fs_.AllocPending(path, path_len, mode) : -1;
  if (error == nullptr && slot < 0) {
    code = ErrorCode::kResourceExhausted;
    error = "no free file slot";
  }
  if (error != nullptr) {
    AbortWrite(s, h, code, error);
    return false;
  }
  ws.active = true;
  ws.id = h.id;
  ws.slot = slot;
  ws.received = 0;
  return true;
}

void Agent::FileWrite(Session* s, const wire::FrameHeader& h, Fields& f) {
  Session::WriteStream& ws = s->write_stream();
  const bool more = (h.flags & wire::kFlagMore) != 0;
  const char* path = nullptr;
  uint32_t path_len = 0;
  uint32_t mode = 0644;
  bool atomic = false;
  uint64_t offset = 0;
  const uint8_t* data = nullptr;
  uint32_t len = 0;
  const bool has_path = f.Str(Tag::kPath, &path, &path_len, wire::kMaxPathLen);
  if (ws.IsDropping(h.id)) {
    // The rest of a failed stream is never answered again; but a first
    // chunk (a path) on its id starts a new stream: the client stopped
    // at our ERROR and used the id again.
    if (!f.ok() || !has_path) {
      if (!more) ws.StopDropping(h.id);
      return;
    }
    ws.StopDropping(h.id);
  }
  f.U32(Tag::kMode, &mode);
  f.Bool(Tag::kAtomic, &atomic);  // every test-guest write is atomic anyway
  f.Require(f.U64(Tag::kOffset, &offset), "missing required field offset");
  f.Bytes(Tag::kData, &data, &len);
  if (!f.ok()) return AbortWrite(s, h, ErrorCode::kInvalidArgument, f.error());

  if (!ws.active || ws.id != h.id) {
    if (!OpenWrite(s, h, has_path ? path : nullptr, path_len, mode, offset)) return;
  } else if (has_path) {
    return AbortWrite(s, h, ErrorCode::kInvalidArgument, "path belongs in the first chunk only");
  }
  if (offset != ws.received) {
    return AbortWrite(s, h, ErrorCode::kInvalidArgument, "chunk offset does not match the bytes sent");
  }
  if (len > RamFs::kMaxFileSize - ws.received) {
    return AbortWrite(s, h, ErrorCode::kResourceExhausted, "test-guest files hold at most 64 KiB");
  }
  RamFs::File& file = fs_.file(ws.slot);
  Copy(file.data + ws.received, data, len);
  ws.received += len;
  file.size = uint32_t(ws.received);
  if (more) return;  // one reply per stream, after the last chunk
  ws.active = false;
  if (!fs_.Commit(ws.slot, wall_clock_ns_)) {
    return s->SendError(h.id, ErrorCode::kResourceExhausted, "file table full (16 files)");
  }
  wire::TlvWriter* w = s->BeginReply(wire::MsgType::kFileWrite, 0, h.id);
  w->PutU64(Tag::kSize, ws.received);
  s->EndReply();
}

void Agent::FileRead(Session* s, uint32_t id, Fields& f) {
  const char* path = nullptr;
  uint32_t path_len = 0;
  uint64_t offset = 0, length = 0;
  ReadPath(f, &path, &path_len);
  f.U64(Tag::kOffset, &offset);
  f.U64(Tag::kLength, &length);
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  const int slot = fs_.Find(path, path_len);
  if (slot < 0) {
    return fs_.IsDir(path, path_len)
               ? s->SendError(id, ErrorCode::kFailedPrecondition, "path is a directory")
               : s->SendError(id, ErrorCode::kNotFound, "no such file");
  }
  const RamFs::File& file = fs_.file(slot);
  const uint64_t size = file.size;
  const uint64_t start = Min(offset, size);
  const uint64_t end = (length == 0 || length > size - start) ? size : start + length;
  const uint64_t chunk = Min<uint64_t>(kReadChunk, s->peer_max_payload() - 64);
  uint64_t pos = start;
  bool first = true;
  do {
    const uint64_t n = Min(chunk, end - pos);
    const uint32_t flags = pos + n < end ? wire::kFlagMore : 0;
    wire::TlvWriter* w = s->BeginReply(wire::MsgType::kFileRead, flags, id);
    w->PutU64(Tag::kOffset, pos);
    w->Put(Tag::kData, file.data + pos, size_t(n));
    if (first) w->PutU64(Tag::kSize, size);
    s->EndReply();
    pos += n;
    first = false;
  } while (pos < end);
}

void Agent::Stat(Session* s, uint32_t id, Fields& f) {
  const char* path = nullptr;
  uint32_t path_len = 0;
  if (!ReadPath(f, &path, &path_len)) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  const int slot = fs_.Find(path, path_len);
  const bool dir = slot < 0 && fs_.IsDir(path, path_len);
  if (slot < 0 && !dir) return s->SendError(id, ErrorCode::kNotFound, "no such file or directory");
  wire::TlvWriter* w = s->BeginReply(wire::MsgType::kStat, 0, id);
  w->PutU8(Tag::kFileType, uint8_t(dir ? wire::FileType::kDirectory : wire::FileType::kFile));
  w->PutU64(Tag::kSize, dir ? 0 : fs_.file(slot).size);
  w->PutU32(Tag::kMode, dir ? 0755 : fs_.file(slot).mode);
  w->PutU64(Tag::kMtimeNs, dir ? 0 : fs_.file(slot).mtime_ns);
  w->PutU32(Tag::kUid, 0);
  w->PutU32(Tag::kGid, 0);
  s->EndReply();
}

void Agent::List(Session* s, uint32_t id, Fields& f) {
  const char* path = nullptr;
  uint32_t path_len = 0;
  if (!ReadPath(f, &path, &path_len)) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  if (!fs_.IsDir(path, path_len)) {
    return fs_.Find(path, path_len) >= 0
               ? s->SendError(id, ErrorCode::kFailedPrecondition, "not a directory")
               : s->SendError(id, ErrorCode::kNotFound, "no such directory");
  }
  // Subdirectories are implied by several files: report each name once.
  const char* seen[RamFs::kSlots];
  uint32_t seen_len[RamFs::kSlots];
  uint32_t seen_count = 0;
  wire::TlvWriter* w = s->BeginReply(wire::MsgType::kList, 0, id);
  for (uint32_t i = 0; i < RamFs::kSlots; ++i) {
    const char* name = nullptr;
    bool is_dir = false;
    const uint32_t n = fs_.ChildOf(int(i), path, path_len, &name, &is_dir);
    if (n == 0) continue;
    bool dup = false;
    for (uint32_t j = 0; j < seen_count && !dup; ++j) {
      dup = seen_len[j] == n && Equal(seen[j], name, n);
    }
    if (dup) continue;
    seen[seen_count] = name;
    seen_len[seen_count++] = n;
    const RamFs::File& file = fs_.file(int(i));
    const size_t mark = w->BeginNested(Tag::kEntry);
    w->Put(Tag::kEntryName, name, n);
    w->PutU8(Tag::kFileType, uint8_t(is_dir ? wire::FileType::kDirectory : wire::FileType::kFile));
    w->PutU64(Tag::kSize, is_dir ? 0 : file.size);
    w->PutU32(Tag::kMode, is_dir ? 0755 : file.mode);
    w->PutU64(Tag::kMtimeNs, is_dir ? 0 : file.mtime_ns);
    w->EndNested(mark);
  }
  s->EndReply();
}

void Agent::Remove(Session* s, uint32_t id, Fields& f) {
  const char* path = nullptr;
  uint32_t path_len = 0;
  bool recursive = false;
  ReadPath(f, &path, &path_len);
  f.Bool(Tag::kRecursive, &recursive);
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  const int slot = fs_.Find(path, path_len);
  if (slot >= 0) {
    fs_.Release(slot);
    return SendEmpty(s, wire::MsgType::kRemove, id);
  }
  if (path_len == 1) return s->SendError(id, ErrorCode::kInvalidArgument, "refusing to remove /");
  if (!fs_.IsDir(path, path_len)) {
    return s->SendError(id, ErrorCode::kNotFound, "no such file or directory");
  }
  if (!recursive) return s->SendError(id, ErrorCode::kFailedPrecondition, "directory not empty");
  fs_.RemoveTree(path, path_len);
  SendEmpty(s, wire::MsgType::kRemove, id);
}

void Agent::Chmod(Session* s, uint32_t id, Fields& f) {
  const char* path = nullptr;
  uint32_t path_len = 0;
  uint32_t mode = 0;
  ReadPath(f, &path, &path_len);
  f.Require(f.U32(Tag::kMode, &mode), "missing required field mode");
  if (f.ok() && mode > 07777) f.Fail("mode above 07777");
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  const int slot = fs_.Find(path, path_len);
  if (slot < 0) {
    return fs_.IsDir(path, path_len)
               ? s->SendError(id, ErrorCode::kFailedPrecondition,
                              "implicit directories have no mode")
               : s->SendError(id, ErrorCode::kNotFound, "no such file");
  }
  fs_.file(slot).mode = mode;
  SendEmpty(s, wire::MsgType::kChmod, id);
}

}  // namespace kubicle::guest::testguest
