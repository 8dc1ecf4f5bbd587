// Codec for the exec and file messages (see messages.h).
#include <limits>

#include "guest/protocol/messages.h"
#include "guest/protocol/tlv.h"

namespace kubicle::guest::protocol {

namespace {
template <typename T>
Result<T> Finish(FieldReader& r, T value) {
  if (!r.status().ok()) return r.status();
  return value;
}

void CheckPath(FieldReader& r, const std::string& path) {
  if (r.status().ok()) r.Fail(ValidatePath(path));
}

void CheckMode(FieldReader& r, uint32_t mode) {
  if (r.status().ok() && mode > 07777) r.Fail(Status::InvalidArgument("mode above 07777"));
}
}  // namespace

// ---- EXEC ----

Bytes ExecStartRequest::Encode() const {
  TlvBuilder b;
  for (const auto& a : argv) b.Str(Tag::kArgv, a);
  if (!shell_command.empty()) b.Str(Tag::kShellCommand, shell_command);
  for (const auto& e : env) b.Str(Tag::kEnv, e);
  if (!cwd.empty()) b.Str(Tag::kCwd, cwd);
  if (!stdin_data.empty()) b.Bytes(Tag::kStdin, stdin_data);
  if (stdin_streamed) b.Bool(Tag::kStdinStreamed, true);
  if (timeout_ms != 0) b.U64(Tag::kTimeoutMs, timeout_ms);
  if (output_limit != 0) b.U64(Tag::kOutputLimit, output_limit);
  if (background) b.Bool(Tag::kBackground, true);
  if (as_agent) b.Bool(Tag::kAsAgent, true);
  return b.Take();
}

Result<ExecStartRequest> ExecStartRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ExecStartRequest m;
  m.argv = r.StrList(Tag::kArgv, kMaxPathLen * 32, kMaxArgs);
  m.shell_command = r.Str(Tag::kShellCommand, kMaxPayload).value_or("");
  m.env = r.StrList(Tag::kEnv, kMaxPathLen * 32, kMaxArgs);
  m.cwd = r.Str(Tag::kCwd, kMaxPathLen).value_or("");
  m.stdin_data = r.Bytes(Tag::kStdin, kMaxPayload).value_or(Bytes{});
  m.stdin_streamed = r.Bool(Tag::kStdinStreamed);
  m.timeout_ms = r.U64(Tag::kTimeoutMs).value_or(0);
  m.output_limit = r.U64(Tag::kOutputLimit).value_or(0);
  m.background = r.Bool(Tag::kBackground);
  m.as_agent = r.Bool(Tag::kAsAgent);
  if (!r.status().ok()) return r.status();
  if (m.argv.empty() == m.shell_command.empty()) {
    return Status::InvalidArgument("exactly one of argv and shell_command is required");
  }
  for (const auto& e : m.env) {
    if (e.find('=') == std::string::npos || e[0] == '=') {
      return Status::InvalidArgument("env entry must be KEY=VALUE");
    }
  }
  if (!m.cwd.empty()) RETURN_IF_ERROR(ValidatePath(m.cwd));
  if (m.stdin_streamed && !m.stdin_data.empty()) {
    return Status::InvalidArgument("stdin is either inline or streamed, not both");
  }
  if (m.background && m.stdin_streamed) {
    return Status::InvalidArgument("a background exec cannot stream stdin");
  }
  return m;
}

Bytes ExecStartReply::Encode() const { return TlvBuilder().U32(Tag::kPid, pid).Take(); }
Result<ExecStartReply> ExecStartReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ExecStartReply m;
  m.pid = r.U32(Tag::kPid).value_or(0);
  return Finish(r, m);
}

Bytes ExecStdinChunk::Encode() const { return TlvBuilder().Bytes(Tag::kData, data).Take(); }
Result<ExecStdinChunk> ExecStdinChunk::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ExecStdinChunk m;
  m.data = r.Bytes(Tag::kData, kMaxPayload).value_or(Bytes{});
  return Finish(r, std::move(m));
}

Bytes ExecOutputChunk::Encode() const {
  return TlvBuilder().U8(Tag::kStream, uint8_t(stream)).Bytes(Tag::kData, data).Take();
}
Result<ExecOutputChunk> ExecOutputChunk::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ExecOutputChunk m;
  const uint8_t s = r.Required(r.U8(Tag::kStream), Tag::kStream);
  m.data = r.Required(r.Bytes(Tag::kData, kMaxPayload), Tag::kData);
  if (r.status().ok() && s != 1 && s != 2) {
    r.Fail(Status::InvalidArgument("stream must be 1 (stdout) or 2 (stderr)"));
  }
  m.stream = OutputStream(s);
  return Finish(r, std::move(m));
}

Bytes ExecExitReply::Encode() const {
  TlvBuilder b;
  if (exit_code.has_value()) b.U32(Tag::kExitCode, uint32_t(*exit_code));
  if (signal.has_value()) b.U32(Tag::kSignal, *signal);
  if (timed_out) b.Bool(Tag::kTimedOut, true);
  if (truncated) b.Bool(Tag::kTruncated, true);
  return b.Take();
}
Result<ExecExitReply> ExecExitReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ExecExitReply m;
  auto code = r.U32(Tag::kExitCode);
  m.signal = r.U32(Tag::kSignal);
  m.timed_out = r.Bool(Tag::kTimedOut);
  m.truncated = r.Bool(Tag::kTruncated);
  if (!r.status().ok()) return r.status();
  if (code.has_value() == m.signal.has_value()) {
    return Status::InvalidArgument("exactly one of exit_code and signal is required");
  }
  if (code.has_value()) m.exit_code = int32_t(*code);
  return m;
}

Bytes ExecSignalRequest::Encode() const {
  return TlvBuilder().U32(Tag::kExecId, exec_id).U32(Tag::kSignal, signal).Take();
}
Result<ExecSignalRequest> ExecSignalRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ExecSignalRequest m;
  m.exec_id = r.Required(r.U32(Tag::kExecId), Tag::kExecId);
  m.signal = r.Required(r.U32(Tag::kSignal), Tag::kSignal);
  if (r.status().ok() && (m.signal == 0 || m.signal > 64)) {
    r.Fail(Status::InvalidArgument("signal must be 1..64"));
  }
  return Finish(r, m);
}

// ---- FILES ----

Bytes FileWriteChunk::Encode() const {
  TlvBuilder b;
  if (path.has_value()) {
    b.Str(Tag::kPath, *path).U32(Tag::kMode, mode);
    if (atomic) b.Bool(Tag::kAtomic, true);
  }
  b.U64(Tag::kOffset, offset).Bytes(Tag::kData, data);
  return b.Take();
}
Result<FileWriteChunk> FileWriteChunk::Decode(ByteSpan payload) {
  FieldReader r(payload);
  FileWriteChunk m;
  m.path = r.Str(Tag::kPath, kMaxPathLen);
  m.mode = r.U32(Tag::kMode).value_or(0644);
  m.atomic = r.Bool(Tag::kAtomic);
  m.offset = r.Required(r.U64(Tag::kOffset), Tag::kOffset);
  m.data = r.Bytes(Tag::kData, kMaxPayload).value_or(Bytes{});
  if (m.path.has_value()) CheckPath(r, *m.path);
  CheckMode(r, m.mode);
  if (r.status().ok() && m.offset > std::numeric_limits<uint64_t>::max() - m.data.size()) {
    r.Fail(Status::InvalidArgument("offset + data overflows"));
  }
  return Finish(r, std::move(m));
}

Bytes FileWriteReply::Encode() const { return TlvBuilder().U64(Tag::kSize, size).Take(); }
Result<FileWriteReply> FileWriteReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  FileWriteReply m;
  m.size = r.Required(r.U64(Tag::kSize), Tag::kSize);
  return Finish(r, m);
}

Bytes FileReadRequest::Encode() const {
  TlvBuilder b;
  b.Str(Tag::kPath, path);
  if (offset != 0) b.U64(Tag::kOffset, offset);
  if (length != 0) b.U64(Tag::kLength, length);
  return b.Take();
}
Result<FileReadRequest> FileReadRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  FileReadRequest m;
  m.path = r.Required(r.Str(Tag::kPath, kMaxPathLen), Tag::kPath);
  m.offset = r.U64(Tag::kOffset).value_or(0);
  m.length = r.U64(Tag::kLength).value_or(0);
  CheckPath(r, m.path);
  return Finish(r, std::move(m));
}

Bytes FileReadChunk::Encode() const {
  TlvBuilder b;
  b.U64(Tag::kOffset, offset).Bytes(Tag::kData, data);
  if (size.has_value()) b.U64(Tag::kSize, *size);
  return b.Take();
}
Result<FileReadChunk> FileReadChunk::Decode(ByteSpan payload) {
  FieldReader r(payload);
  FileReadChunk m;
  m.offset = r.Required(r.U64(Tag::kOffset), Tag::kOffset);
  m.data = r.Required(r.Bytes(Tag::kData, kMaxPayload), Tag::kData);
  m.size = r.U64(Tag::kSize);
  return Finish(r, std::move(m));
}

namespace {
Bytes EncodePath(const std::string& path) { return TlvBuilder().Str(Tag::kPath, path).Take(); }
}  // namespace

Bytes StatRequest::Encode() const { return EncodePath(path); }
Result<StatRequest> StatRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  StatRequest m;
  m.path = r.Required(r.Str(Tag::kPath, kMaxPathLen), Tag::kPath);
  CheckPath(r, m.path);
  return Finish(r, std::move(m));
}

namespace {
FileType ReadFileType(FieldReader& r) {
  const uint8_t t = r.Required(r.U8(Tag::kFileType), Tag::kFileType);
  if (r.status().ok() && (t < 1 || t > 4)) r.Fail(Status::InvalidArgument("file_type must be 1..4"));
  return FileType(t);
}
}  // namespace

Bytes StatReply::Encode() const {
  return TlvBuilder()
      .U8(Tag::kFileType, uint8_t(type))
      .U64(Tag::kSize, size)
      .U32(Tag::kMode, mode)
      .U64(Tag::kMtimeNs, mtime_ns)
      .U32(Tag::kUid, uid)
      .U32(Tag::kGid, gid)
      .Take();
}
Result<StatReply> StatReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  StatReply m;
  m.type = ReadFileType(r);
  m.size = r.Required(r.U64(Tag::kSize), Tag::kSize);
  m.mode = r.Required(r.U32(Tag::kMode), Tag::kMode);
  m.mtime_ns = r.U64(Tag::kMtimeNs).value_or(0);
  m.uid = r.U32(Tag::kUid).value_or(0);
  m.gid = r.U32(Tag::kGid).value_or(0);
  return Finish(r, m);
}

Bytes ListRequest::Encode() const { return EncodePath(path); }
Result<ListRequest> ListRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ListRequest m;
  m.path = r.Required(r.Str(Tag::kPath, kMaxPathLen), Tag::kPath);
  CheckPath(r, m.path);
  return Finish(r, std::move(m));
}

Bytes ListReply::Encode() const {
  TlvBuilder b;
  for (const DirEntry& e : entries) {
    const size_t mark = b.BeginNested(Tag::kEntry);
    b.Str(Tag::kEntryName, e.name)
        .U8(Tag::kFileType, uint8_t(e.type))
        .U64(Tag::kSize, e.size)
        .U32(Tag::kMode, e.mode)
        .U64(Tag::kMtimeNs, e.mtime_ns);
    b.EndNested(mark);
  }
  return b.Take();
}
Result<ListReply> ListReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ListReply m;
  for (ByteSpan inner : r.NestedList(Tag::kEntry, kMaxPayload / kTlvHeaderSize)) {
    FieldReader er(inner);
    DirEntry e;
    e.name = er.Required(er.Str(Tag::kEntryName, kMaxNameLen), Tag::kEntryName);
    e.type = ReadFileType(er);
    e.size = er.U64(Tag::kSize).value_or(0);
    e.mode = er.U32(Tag::kMode).value_or(0);
    e.mtime_ns = er.U64(Tag::kMtimeNs).value_or(0);
    if (er.status().ok() && (e.name.empty() || e.name.find('/') != std::string::npos)) {
      er.Fail(Status::InvalidArgument("entry name must be non-empty and contain no '/'"));
    }
    if (!er.status().ok()) return er.status().WithContext("entry");
    m.entries.push_back(std::move(e));
  }
  return Finish(r, std::move(m));
}

Bytes MkdirRequest::Encode() const {
  TlvBuilder b;
  b.Str(Tag::kPath, path).U32(Tag::kMode, mode);
  if (parents) b.Bool(Tag::kParents, true);
  return b.Take();
}
Result<MkdirRequest> MkdirRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  MkdirRequest m;
  m.path = r.Required(r.Str(Tag::kPath, kMaxPathLen), Tag::kPath);
  m.mode = r.U32(Tag::kMode).value_or(0755);
  m.parents = r.Bool(Tag::kParents);
  CheckPath(r, m.path);
  CheckMode(r, m.mode);
  return Finish(r, std::move(m));
}

Bytes RemoveRequest::Encode() const {
  TlvBuilder b;
  b.Str(Tag::kPath, path);
  if (recursive) b.Bool(Tag::kRecursive, true);
  return b.Take();
}
Result<RemoveRequest> RemoveRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  RemoveRequest m;
  m.path = r.Required(r.Str(Tag::kPath, kMaxPathLen), Tag::kPath);
  m.recursive = r.Bool(Tag::kRecursive);
  CheckPath(r, m.path);
  if (r.status().ok() && m.path == "/") r.Fail(Status::InvalidArgument("refusing to remove /"));
  return Finish(r, std::move(m));
}

Bytes ChmodRequest::Encode() const {
  return TlvBuilder().Str(Tag::kPath, path).U32(Tag::kMode, mode).Take();
}
Result<ChmodRequest> ChmodRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ChmodRequest m;
  m.path = r.Required(r.Str(Tag::kPath, kMaxPathLen), Tag::kPath);
  m.mode = r.Required(r.U32(Tag::kMode), Tag::kMode);
  CheckPath(r, m.path);
  CheckMode(r, m.mode);
  return Finish(r, std::move(m));
}

}  // namespace kubicle::guest::protocol
