// Agent: dispatch, connection messages, identity, clone hook and test extras.
// File messages are in agent_files.cc.
#include "guest/testguest/agent.h"

#include "guest/testguest/fields.h"
#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest {

using wire::ErrorCode;
using wire::Tag;

void Agent::Init(Platform* platform, const AgentConfig& config) {
  platform_ = platform;
  cid_ = config.cid;
  memory_bytes_ = config.memory_bytes;
  fill_area_ = config.fill_area;
  fill_area_size_ = config.fill_area_size & ~uint64_t{7};
  fill_size_ = fill_seed_ = 0;
  hostname_len_ = uint32_t(CStrLen(kDefaultHostname));
  Copy(hostname_, kDefaultHostname, hostname_len_ + 1);
  generation_ = 0;
  wall_clock_ns_ = 0;
  boot_entropy_ok_ = platform_->ReadEntropy(boot_id_, sizeof(boot_id_));
  if (!boot_entropy_ok_) Zero(boot_id_, sizeof(boot_id_));
  entropy_digest_ = wire::Fnv1a64(wire::kFnvOffset, boot_id_, sizeof(boot_id_));
  fs_.Attach(config.file_data);
}

void Agent::RefuseFrame(Session* s, const wire::FrameHeader& h, ErrorCode code,
                        const char* message) {
  if (h.id != 0 && Type(h.type) == Type::kFileWrite) return RefuseWrite(s, h, code, message);
  if (h.id != 0 && Type(h.type) == Type::kExecStdin) return;
  s->SendError(h.id, code, message);
}

void Agent::HandleFrame(Session* s, const wire::FrameHeader& h, const uint8_t* payload) {
  const Type type = Type(h.type);
  if (type == Type::kHello) {
    // HELLO is always version 1 so any peer can negotiate.
    if (h.version != wire::kVersion1) {
      return RefuseFrame(s, h, ErrorCode::kFailedPrecondition, "HELLO must use version 1");
    }
  } else if (h.version != s->version()) {
    return RefuseFrame(s, h, ErrorCode::kFailedPrecondition, "unsupported protocol version");
  }
  if ((h.flags & wire::kFlagReply) != 0) {
    return RefuseFrame(s, h, ErrorCode::kInvalidArgument, "agent does not accept replies");
  }
  if (h.id == 0) return s->SendError(0, ErrorCode::kInvalidArgument, "request id 0 is reserved");
  Fields f(payload, h.payload_len);
  if (!f.ok() && type != Type::kFileWrite) {
    return RefuseFrame(s, h, ErrorCode::kInvalidArgument, f.error());
  }
  switch (type) {
    case Type::kHello: return Hello(s, h.id, f);
    case Type::kPing: return Ping(s, h.id, f);
    case Type::kEcho: return Echo(s, h.id, f);
    case Type::kIdentity: return Identity(s, h.id, f);
    case Type::kPostRestore: return PostRestore(s, h.id, f);
    case Type::kMemFill: return MemFill(s, h.id, f);
    case Type::kMemChecksum: return MemChecksum(s, h.id, f);
    case Type::kEntropyRead: return EntropyRead(s, h.id, f);
    case Type::kDiskInfo: return DiskInfo(s, h.id, f);
    case Type::kDiskRead: return DiskRead(s, h.id, f);
    case Type::kDiskWrite: return DiskWrite(s, h.id, f);
    case Type::kFileWrite: return FileWrite(s, h, f);
    case Type::kFileRead: return FileRead(s, h.id, f);
    case Type::kStat: return Stat(s, h.id, f);
    case Type::kList: return List(s, h.id, f);
    case Type::kRemove: return Remove(s, h.id, f);
    case Type::kChmod: return Chmod(s, h.id, f);
    case Type::kExecStart: return ExecStart(s, h.id, f, payload, h.payload_len);
    // Built-in execs end inside EXEC_START: stdin and signals only ever
    // name finished execs (stdin is dropped, as for any unknown exec).
    case Type::kExecStdin: return;
    case Type::kExecSignal:
      return s->SendError(h.id, ErrorCode::kNotFound, "no running exec (built-ins finish at once)");
    case Type::kMkdir:
      return s->SendError(h.id, ErrorCode::kUnimplemented,
                          "the test guest's directories are implicit");
    default: return s->SendError(h.id, ErrorCode::kUnimplemented, "unknown message type");
  }
}

void Agent::SendEmpty(Session* s, Type type, uint32_t id) {
  s->BeginReply(type, 0, id);
  s->EndReply();
}

void Agent::Hello(Session* s, uint32_t id, Fields& f) {
  uint16_t min = 0, max = 0;
  uint32_t peer_max = wire::kMaxPayload;
  f.Require(f.U16(Tag::kMinVersion, &min), "missing required field min_version");
  f.Require(f.U16(Tag::kMaxVersion, &max), "missing required field max_version");
  f.U32(Tag::kMaxPayload, &peer_max);
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  if (peer_max < wire::kMinPayloadLimit || peer_max > wire::kMaxPayload) {
    return s->SendError(id, ErrorCode::kInvalidArgument, "max_payload out of range");
  }
  const uint16_t lo = min > wire::kMinVersion ? min : wire::kMinVersion;
  const uint16_t hi = max < wire::kMaxVersion ? max : wire::kMaxVersion;
  if (lo > hi) return s->SendError(id, ErrorCode::kFailedPrecondition, "no common protocol version");
  s->SetNegotiated(hi, peer_max);
  wire::TlvWriter* w = s->BeginReply(Type::kHello, 0, id);
  w->PutU16(Tag::kVersion, hi);
  w->PutCStr(Tag::kName, kName);
  w->PutCStr(Tag::kSoftwareVersion, kSoftwareVersion);
  static const char* const kCaps[] = {"testguest", "files", "mem", "entropy", "disk",
                                       "exec"};
  for (const char* cap : kCaps) w->PutCStr(Tag::kCapability, cap);
  w->PutU32(Tag::kMaxPayload, Session::kMaxRxPayload);
  s->EndReply();
}

void Agent::Ping(Session* s, uint32_t id, Fields& f) {
  uint64_t nonce = 0;
  f.U64(Tag::kNonce, &nonce);
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  wire::TlvWriter* w = s->BeginReply(Type::kPong, 0, id);
  w->PutU64(Tag::kNonce, nonce);
  s->EndReply();
}

void Agent::Echo(Session* s, uint32_t id, Fields& f) {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
  f.Require(f.Bytes(Tag::kData, &data, &len), "missing required field data");
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  wire::TlvWriter* w = s->BeginReply(Type::kEcho, 0, id);
  w->Put(Tag::kData, data, len);
  s->EndReply();
}

void Agent::Identity(Session* s, uint32_t id, Fields&) {
  wire::TlvWriter* w = s->BeginReply(Type::kIdentity, 0, id);
  w->Put(Tag::kHostname, hostname_, hostname_len_);
  w->PutU64(Tag::kCid, cid_);
  w->PutU64(Tag::kGeneration, generation_);
  w->Put(Tag::kBootId, boot_id_, sizeof(boot_id_));
  w->PutU32(Tag::kCpus, platform_->CpusRunning());
  w->PutU64(Tag::kMemoryBytes, memory_bytes_);
  const uint64_t up = platform_->UptimeNs();
  if (up != 0) w->PutU64(Tag::kUptimeNs, up);
  if (wall_clock_ns_ != 0) w->PutU64(Tag::kWallClockNs, wall_clock_ns_);
  w->PutU64(Tag::kEntropyDigest, entropy_digest_);
  w->PutCStr(Tag::kName, kName);
  w->PutCStr(Tag::kSoftwareVersion, kSoftwareVersion);
  s->EndReply();
}

namespace {
bool ValidHostname(const char* p, uint32_t n) {
  if (n == 0 || n > wire::kMaxHostnameLen) return false;
  for (uint32_t i = 0; i < n; ++i) {
    const char c = p[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}
}  // namespace

void Agent::PostRestore(Session* s, uint32_t id, Fields& f) {
  const uint8_t* seed = nullptr;
  uint32_t seed_len = 0;
  const char* host = nullptr;
  uint32_t host_len = 0;
  uint64_t clock = 0, generation = 0;
  const bool has_seed = f.Bytes(Tag::kEntropySeed, &seed, &seed_len);
  const bool has_host = f.Str(Tag::kHostname, &host, &host_len, wire::kMaxHostnameLen);
  f.U64(Tag::kWallClockNs, &clock);
  f.Require(f.U64(Tag::kGeneration, &generation), "missing required field generation");
  if (f.ok() && has_seed && seed_len > wire::kMaxEntropySeed) f.Fail("entropy_seed too long");
  if (f.ok() && has_host && !ValidHostname(host, host_len)) f.Fail("invalid hostname");
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  if (has_seed) entropy_digest_ = wire::Fnv1a64(entropy_digest_, seed, seed_len);
  if (has_host) {
    Copy(hostname_, host, host_len);
    hostname_[host_len] = '\0';
    hostname_len_ = host_len;
  }
  if (clock != 0) wall_clock_ns_ = clock;
  generation_ = generation;
  wire::TlvWriter* w = s->BeginReply(Type::kPostRestore, 0, id);
  w->PutU64(Tag::kGeneration, generation_);
  s->EndReply();
}

void Agent::MemFill(Session* s, uint32_t id, Fields& f) {
  uint64_t seed = 0, size = 0;
  f.Require(f.U64(Tag::kSeed, &seed), "missing required field seed");
  f.Require(f.U64(Tag::kSize, &size), "missing required field size");
  if (f.ok() && size % 8 != 0) f.Fail("size must be a multiple of 8");
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  if (size > fill_area_size_) {
    return s->SendError(id, ErrorCode::kOutOfRange, "size above the free RAM of the test guest");
  }
  // A tight loop: one store and one add per word (every guest instruction
  // may be emulated, so this is the cost that matters).
  uint64_t* words = reinterpret_cast<uint64_t*>(fill_area_);
  uint64_t v = seed * wire::kMemPatternMultiplier;
  const uint64_t n = size / 8;
  for (uint64_t i = 0; i < n; ++i) {
    words[i] = v;
    v += wire::kMemPatternMultiplier;
  }
  fill_seed_ = seed;
  fill_size_ = size;
  wire::TlvWriter* w = s->BeginReply(Type::kMemFill, 0, id);
  w->PutU64(Tag::kSize, size);
  s->EndReply();
}

void Agent::MemChecksum(Session* s, uint32_t id, Fields&) {
  wire::MemChecksumState st;
  st.Update(reinterpret_cast<const uint64_t*>(fill_area_), size_t(fill_size_ / 8));
  wire::TlvWriter* w = s->BeginReply(Type::kMemChecksum, 0, id);
  w->PutU64(Tag::kSize, fill_size_);
  w->PutU64(Tag::kSeed, fill_seed_);
  w->PutU64(Tag::kChecksum, st.Final());
  s->EndReply();
}

void Agent::EntropyRead(Session* s, uint32_t id, Fields& f) {
  uint64_t len = 0;
  f.Require(f.U64(Tag::kLength, &len), "missing required field length");
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  if (len == 0 || len > kMaxEntropyRead) {
    return s->SendError(id, ErrorCode::kOutOfRange, "length must be 1..4096 in the test guest");
  }
  wire::TlvWriter* w = s->BeginReply(Type::kEntropyRead, 0, id);
  uint8_t* out = w->Reserve(Tag::kData, size_t(len));
  if (out != nullptr && !platform_->ReadEntropy(out, uint32_t(len))) {
    // Overwrite the half-built reply with an ERROR.
    return s->SendError(id, ErrorCode::kUnavailable, "no virtio-rng device");
  }
  s->EndReply();
}

}  // namespace kubicle::guest::testguest
