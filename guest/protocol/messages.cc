// Codec for the connection, identity and test-guest messages. Exec and file
// messages are in messages_exec_files.cc.
#include "guest/protocol/messages.h"

#include <algorithm>

#include "guest/protocol/tlv.h"

namespace kubicle::guest::protocol {

namespace {
template <typename T>
Result<T> Finish(FieldReader& r, T value) {
  if (!r.status().ok()) return r.status();
  return value;
}
}  // namespace

Status ValidatePath(std::string_view path) {
  if (path.empty() || path[0] != '/') return Status::InvalidArgument("path must be absolute");
  if (path.size() > kMaxPathLen) return Status::InvalidArgument("path too long");
  if (path.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("path contains NUL");
  }
  return Status::Ok();
}

Status ValidateHostname(std::string_view name) {
  if (name.empty() || name.size() > kMaxHostnameLen) {
    return Status::InvalidArgument("hostname must be 1.." + std::to_string(kMaxHostnameLen) +
                                   " bytes");
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.';
    if (!ok) return Status::InvalidArgument("hostname has a character outside [A-Za-z0-9.-]");
  }
  return Status::Ok();
}

uint16_t NegotiateVersion(uint16_t a_min, uint16_t a_max, uint16_t b_min, uint16_t b_max) {
  const uint16_t lo = std::max(a_min, b_min);
  const uint16_t hi = std::min(a_max, b_max);
  return lo <= hi ? hi : 0;
}

// ---- HELLO ----

namespace {
Status CheckPayloadLimit(uint32_t v) {
  if (v < kMinPayloadLimit || v > kMaxPayload) {
    return Status::InvalidArgument("max_payload " + std::to_string(v) + " outside [" +
                                   std::to_string(kMinPayloadLimit) + ", " +
                                   std::to_string(kMaxPayload) + "]");
  }
  return Status::Ok();
}
}  // namespace

Bytes HelloRequest::Encode() const {
  TlvBuilder b;
  b.U16(Tag::kMinVersion, min_version).U16(Tag::kMaxVersion, max_version);
  if (!name.empty()) b.Str(Tag::kName, name);
  if (!software_version.empty()) b.Str(Tag::kSoftwareVersion, software_version);
  for (const auto& c : capabilities) b.Str(Tag::kCapability, c);
  b.U32(Tag::kMaxPayload, max_payload);
  return b.Take();
}

Result<HelloRequest> HelloRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  HelloRequest m;
  m.min_version = r.Required(r.U16(Tag::kMinVersion), Tag::kMinVersion);
  m.max_version = r.Required(r.U16(Tag::kMaxVersion), Tag::kMaxVersion);
  m.name = r.Str(Tag::kName, kMaxNameLen).value_or("");
  m.software_version = r.Str(Tag::kSoftwareVersion, kMaxNameLen).value_or("");
  m.capabilities = r.StrList(Tag::kCapability, kMaxNameLen, 64);
  m.max_payload = r.U32(Tag::kMaxPayload).value_or(kMaxPayload);
  if (r.status().ok() && m.min_version > m.max_version) {
    r.Fail(Status::InvalidArgument("min_version above max_version"));
  }
  if (r.status().ok()) r.Fail(CheckPayloadLimit(m.max_payload));
  return Finish(r, std::move(m));
}

bool HelloReply::HasCapability(std::string_view cap) const {
  return std::find(capabilities.begin(), capabilities.end(), cap) != capabilities.end();
}

Bytes HelloReply::Encode() const {
  TlvBuilder b;
  b.U16(Tag::kVersion, version);
  if (!name.empty()) b.Str(Tag::kName, name);
  if (!software_version.empty()) b.Str(Tag::kSoftwareVersion, software_version);
  for (const auto& c : capabilities) b.Str(Tag::kCapability, c);
  b.U32(Tag::kMaxPayload, max_payload);
  return b.Take();
}

Result<HelloReply> HelloReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  HelloReply m;
  m.version = r.Required(r.U16(Tag::kVersion), Tag::kVersion);
  m.name = r.Str(Tag::kName, kMaxNameLen).value_or("");
  m.software_version = r.Str(Tag::kSoftwareVersion, kMaxNameLen).value_or("");
  m.capabilities = r.StrList(Tag::kCapability, kMaxNameLen, 64);
  m.max_payload = r.Required(r.U32(Tag::kMaxPayload), Tag::kMaxPayload);
  if (r.status().ok()) r.Fail(CheckPayloadLimit(m.max_payload));
  return Finish(r, std::move(m));
}

// ---- PING / PONG / ECHO ----

Bytes PingRequest::Encode() const { return TlvBuilder().U64(Tag::kNonce, nonce).Take(); }
Result<PingRequest> PingRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  PingRequest m;
  m.nonce = r.U64(Tag::kNonce).value_or(0);
  return Finish(r, m);
}

Bytes PongReply::Encode() const { return TlvBuilder().U64(Tag::kNonce, nonce).Take(); }
Result<PongReply> PongReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  PongReply m;
  m.nonce = r.U64(Tag::kNonce).value_or(0);
  return Finish(r, m);
}

Bytes EchoMessage::Encode() const { return TlvBuilder().Bytes(Tag::kData, data).Take(); }
Result<EchoMessage> EchoMessage::Decode(ByteSpan payload) {
  FieldReader r(payload);
  EchoMessage m;
  m.data = r.Required(r.Bytes(Tag::kData, kMaxPayload), Tag::kData);
  return Finish(r, std::move(m));
}

// ---- ERROR ----

Bytes ErrorReply::Encode() const {
  TlvBuilder b;
  b.U32(Tag::kErrorCode, uint32_t(code));
  std::string_view msg = message;
  if (msg.size() > kMaxErrorMessageLen) msg = msg.substr(0, kMaxErrorMessageLen);
  b.Str(Tag::kErrorMessage, msg);
  if (errno_value != 0) b.U32(Tag::kErrno, errno_value);
  return b.Take();
}

Result<ErrorReply> ErrorReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  ErrorReply m;
  const uint32_t code = r.Required(r.U32(Tag::kErrorCode), Tag::kErrorCode);
  m.message = r.Str(Tag::kErrorMessage, kMaxErrorMessageLen).value_or("");
  m.errno_value = r.U32(Tag::kErrno).value_or(0);
  if (r.status().ok() && code == 0) r.Fail(Status::InvalidArgument("error_code 0 is not an error"));
  m.code = ErrorCode(code);
  return Finish(r, std::move(m));
}

ErrorReply ErrorReply::FromStatus(const Status& s) {
  ErrorReply e;
  e.code = s.ok() ? ErrorCode::kInternal : ErrorCode(uint32_t(s.code()));
  e.message = s.message();
  e.errno_value = uint32_t(s.error_number());
  return e;
}

Status ErrorReply::ToStatus() const {
  const uint32_t c = uint32_t(code);
  const StatusCode sc = (c >= 1 && c <= uint32_t(StatusCode::kInternal)) ? StatusCode(c)
                                                                          : StatusCode::kInternal;
  return Status(sc, message.empty() ? std::string("agent error") : message, int(errno_value));
}

static_assert(uint32_t(ErrorCode::kInvalidArgument) == uint32_t(StatusCode::kInvalidArgument));
static_assert(uint32_t(ErrorCode::kNotFound) == uint32_t(StatusCode::kNotFound));
static_assert(uint32_t(ErrorCode::kResourceExhausted) == uint32_t(StatusCode::kResourceExhausted));
static_assert(uint32_t(ErrorCode::kUnimplemented) == uint32_t(StatusCode::kUnimplemented));
static_assert(uint32_t(ErrorCode::kInternal) == uint32_t(StatusCode::kInternal));

Result<EmptyMessage> EmptyMessage::Decode(ByteSpan payload) {
  FieldReader r(payload);
  return Finish(r, EmptyMessage{});
}

// ---- IDENTITY / POST_RESTORE ----

Result<IdentityRequest> IdentityRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  return Finish(r, IdentityRequest{});
}

Bytes IdentityReply::Encode() const {
  TlvBuilder b;
  b.Str(Tag::kHostname, hostname).U64(Tag::kCid, cid).U64(Tag::kGeneration, generation);
  if (!boot_id.empty()) b.Bytes(Tag::kBootId, boot_id);
  b.U32(Tag::kCpus, cpus).U64(Tag::kMemoryBytes, memory_bytes);
  if (uptime_ns != 0) b.U64(Tag::kUptimeNs, uptime_ns);
  if (wall_clock_ns != 0) b.U64(Tag::kWallClockNs, wall_clock_ns);
  b.U64(Tag::kEntropyDigest, entropy_digest);
  if (!name.empty()) b.Str(Tag::kName, name);
  if (!software_version.empty()) b.Str(Tag::kSoftwareVersion, software_version);
  return b.Take();
}

Result<IdentityReply> IdentityReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  IdentityReply m;
  m.hostname = r.Required(r.Str(Tag::kHostname, kMaxHostnameLen), Tag::kHostname);
  m.cid = r.Required(r.U64(Tag::kCid), Tag::kCid);
  m.generation = r.Required(r.U64(Tag::kGeneration), Tag::kGeneration);
  m.boot_id = r.Bytes(Tag::kBootId, kBootIdLen).value_or(Bytes{});
  m.cpus = r.U32(Tag::kCpus).value_or(0);
  m.memory_bytes = r.U64(Tag::kMemoryBytes).value_or(0);
  m.uptime_ns = r.U64(Tag::kUptimeNs).value_or(0);
  m.wall_clock_ns = r.U64(Tag::kWallClockNs).value_or(0);
  m.entropy_digest = r.U64(Tag::kEntropyDigest).value_or(0);
  m.name = r.Str(Tag::kName, kMaxNameLen).value_or("");
  m.software_version = r.Str(Tag::kSoftwareVersion, kMaxNameLen).value_or("");
  return Finish(r, std::move(m));
}

Bytes PostRestoreRequest::Encode() const {
  TlvBuilder b;
  if (!entropy_seed.empty()) b.Bytes(Tag::kEntropySeed, entropy_seed);
  if (wall_clock_ns != 0) b.U64(Tag::kWallClockNs, wall_clock_ns);
  if (!hostname.empty()) b.Str(Tag::kHostname, hostname);
  if (!nic_mac.empty()) b.Bytes(Tag::kNicMac, nic_mac);
  b.U64(Tag::kGeneration, generation);
  return b.Take();
}

Result<PostRestoreRequest> PostRestoreRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  PostRestoreRequest m;
  m.entropy_seed = r.Bytes(Tag::kEntropySeed, kMaxEntropySeed).value_or(Bytes{});
  m.wall_clock_ns = r.U64(Tag::kWallClockNs).value_or(0);
  auto host = r.Str(Tag::kHostname, kMaxHostnameLen);
  m.nic_mac = r.Bytes(Tag::kNicMac, 6).value_or(Bytes{});
  m.generation = r.Required(r.U64(Tag::kGeneration), Tag::kGeneration);
  if (r.status().ok() && !m.nic_mac.empty() &&
      (m.nic_mac.size() != 6 || (m.nic_mac[0] & 1) != 0))
    r.Fail(Status::InvalidArgument("nic mac must be 6 bytes, unicast"));
  if (host.has_value()) {
    if (r.status().ok()) r.Fail(ValidateHostname(*host));
    m.hostname = std::move(*host);
  }
  return Finish(r, std::move(m));
}

Bytes PostRestoreReply::Encode() const {
  return TlvBuilder().U64(Tag::kGeneration, generation).Take();
}
Result<PostRestoreReply> PostRestoreReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  PostRestoreReply m;
  m.generation = r.Required(r.U64(Tag::kGeneration), Tag::kGeneration);
  return Finish(r, m);
}

// ---- Test-guest extras ----

Bytes MemFillRequest::Encode() const {
  return TlvBuilder().U64(Tag::kSeed, seed).U64(Tag::kSize, size).Take();
}
Result<MemFillRequest> MemFillRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  MemFillRequest m;
  m.seed = r.Required(r.U64(Tag::kSeed), Tag::kSeed);
  m.size = r.Required(r.U64(Tag::kSize), Tag::kSize);
  if (r.status().ok() && m.size % 8 != 0) {
    r.Fail(Status::InvalidArgument("size must be a multiple of 8"));
  }
  return Finish(r, m);
}

Bytes MemFillReply::Encode() const { return TlvBuilder().U64(Tag::kSize, size).Take(); }
Result<MemFillReply> MemFillReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  MemFillReply m;
  m.size = r.Required(r.U64(Tag::kSize), Tag::kSize);
  return Finish(r, m);
}

Result<MemChecksumRequest> MemChecksumRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  return Finish(r, MemChecksumRequest{});
}

Bytes MemChecksumReply::Encode() const {
  return TlvBuilder()
      .U64(Tag::kSize, size)
      .U64(Tag::kSeed, seed)
      .U64(Tag::kChecksum, checksum)
      .Take();
}
Result<MemChecksumReply> MemChecksumReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  MemChecksumReply m;
  m.size = r.Required(r.U64(Tag::kSize), Tag::kSize);
  m.seed = r.U64(Tag::kSeed).value_or(0);
  m.checksum = r.Required(r.U64(Tag::kChecksum), Tag::kChecksum);
  return Finish(r, m);
}

uint64_t ExpectedMemChecksum(uint64_t seed, uint64_t size) {
  MemChecksumState st;
  uint64_t block[512];
  const uint64_t words = size / 8;
  for (uint64_t i = 0; i < words;) {
    const uint64_t n = std::min<uint64_t>(512, words - i);
    for (uint64_t j = 0; j < n; ++j) block[j] = MemPatternWord(seed, i + j);
    st.Update(block, n);
    i += n;
  }
  return st.Final();
}

Bytes EntropyReadRequest::Encode() const { return TlvBuilder().U64(Tag::kLength, length).Take(); }
Result<EntropyReadRequest> EntropyReadRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  EntropyReadRequest m;
  const uint64_t len = r.Required(r.U64(Tag::kLength), Tag::kLength);
  if (r.status().ok() && (len == 0 || len > kMaxEntropyRead)) {
    r.Fail(Status::InvalidArgument("length must be 1.." + std::to_string(kMaxEntropyRead)));
  }
  m.length = uint32_t(len);
  return Finish(r, m);
}

Bytes EntropyReadReply::Encode() const { return TlvBuilder().Bytes(Tag::kData, data).Take(); }
Result<EntropyReadReply> EntropyReadReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  EntropyReadReply m;
  m.data = r.Required(r.Bytes(Tag::kData, kMaxEntropyRead), Tag::kData);
  return Finish(r, std::move(m));
}

}  // namespace kubicle::guest::protocol
