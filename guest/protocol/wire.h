// The Kubicle agent protocol on the wire: constants, the frame header and TLV
// encoding/decoding over caller-provided buffers.
//
// This header is FREESTANDING: it needs only <stdint.h>/<stddef.h>, no libc,
// no STL, no exceptions, no allocation, so the freestanding test guest, the
// Linux guest agent and the host all share this one definition. The byte
// layout is documented in docs/agent-protocol.md; keep the two in step.
//
// Contracts:
//  - All multi-byte integers are little-endian and are read and written byte
//    by byte, so buffers need no alignment.
//  - Every decoder here treats its input as hostile: it never reads outside
//    [data, data + size), never overflows a length computation, and reports a
//    WireError instead of trusting a length field.
//  - Writers never write past their capacity; on overflow they latch an error
//    and further writes are ignored.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kubicle::guest::protocol {

// ---- Framing constants ------------------------------------------------------

// "KBAP" in memory order (bytes 'K','B','A','P').
inline constexpr uint32_t kMagic = 0x5041424Bu;
inline constexpr size_t kHeaderSize = 24;
// The absolute payload limit; a peer may advertise a smaller receive limit in
// HELLO (kTagMaxPayload), which the other side must respect.
inline constexpr uint32_t kMaxPayload = 1u << 20;
// The smallest receive limit a peer may advertise.
inline constexpr uint32_t kMinPayloadLimit = 4096;
// Bulk data (file contents, exec output, stdin) is sent in chunks of at most
// this many data bytes per frame.
inline constexpr uint32_t kMaxChunk = 64 * 1024;

inline constexpr uint16_t kVersion1 = 1;
// Versions this build implements. HELLO frames are always sent with header
// version kVersion1 so any peer can parse them.
inline constexpr uint16_t kMinVersion = kVersion1;
inline constexpr uint16_t kMaxVersion = kVersion1;

// Default vsock port the guest agent listens on.
inline constexpr uint32_t kAgentVsockPort = 1024;
// The host's vsock CID (VMADDR_CID_HOST).
inline constexpr uint64_t kHostCid = 2;

// Frame flags.
inline constexpr uint32_t kFlagReply = 1u << 0;  // sent by the agent, answers request `id`
inline constexpr uint32_t kFlagMore = 1u << 1;   // more frames of this stream follow
inline constexpr uint32_t kKnownFlags = kFlagReply | kFlagMore;

// ---- Message types ----------------------------------------------------------

enum class MsgType : uint16_t {
  kHello = 0x0001,
  kPing = 0x0002,
  kPong = 0x0003,
  kEcho = 0x0004,
  kError = 0x0005,

  kExecStart = 0x0010,
  kExecStdin = 0x0011,
  kExecOutput = 0x0012,
  kExecExit = 0x0013,
  kExecSignal = 0x0014,

  kFileWrite = 0x0020,
  kFileRead = 0x0021,
  kStat = 0x0022,
  kList = 0x0023,
  kMkdir = 0x0024,
  kRemove = 0x0025,
  kChmod = 0x0026,

  kIdentity = 0x0030,
  kPostRestore = 0x0031,

  // Test-guest extras.
  kMemFill = 0x0040,
  kMemChecksum = 0x0041,
  kEntropyRead = 0x0042,
  kDiskInfo = 0x0043,
  kDiskRead = 0x0044,
  kDiskWrite = 0x0045,
};

// ---- TLV tags (one global registry; each message documents which it uses) ----
//
// Value kinds: u8/u16/u32/u64 are fixed-width little-endian and must have
// exactly that length; str is UTF-8 without NUL; bytes is opaque; nested is a
// TLV sequence.
enum class Tag : uint16_t {
  kMinVersion = 0x0001,       // u16
  kMaxVersion = 0x0002,       // u16
  kVersion = 0x0003,          // u16, the version chosen by the agent
  kName = 0x0004,             // str, software name of the sender
  kSoftwareVersion = 0x0005,  // str
  kCapability = 0x0006,       // str, repeated
  kMaxPayload = 0x0007,       // u32, sender's receive limit

  kErrorCode = 0x0010,     // u32, an ErrorCode
  kErrorMessage = 0x0011,  // str
  kErrno = 0x0012,         // u32

  kData = 0x0020,   // bytes
  kNonce = 0x0021,  // u64

  kArgv = 0x0030,           // str, repeated
  kShellCommand = 0x0031,   // str
  kEnv = 0x0032,            // str "KEY=VALUE", repeated
  kCwd = 0x0033,            // str
  kStdin = 0x0034,          // bytes, inline stdin
  kStdinStreamed = 0x0035,  // u8 bool
  kTimeoutMs = 0x0036,      // u64
  kOutputLimit = 0x0037,    // u64, bytes of stdout+stderr kept
  kBackground = 0x0038,     // u8 bool
  kStream = 0x0039,         // u8, 1 stdout, 2 stderr
  kExitCode = 0x003a,       // u32 (two's complement int32)
  kSignal = 0x003b,         // u32
  kTimedOut = 0x003c,       // u8 bool
  kTruncated = 0x003d,      // u8 bool
  kPid = 0x003e,            // u32
  kExecId = 0x003f,         // u32, the request id of an exec

  kPath = 0x0040,       // str
  kMode = 0x0041,       // u32, permission bits
  kOffset = 0x0042,     // u64
  kLength = 0x0043,     // u64
  kAtomic = 0x0044,     // u8 bool
  kParents = 0x0045,    // u8 bool
  kRecursive = 0x0046,  // u8 bool
  kFileType = 0x0047,   // u8, a FileType
  kSize = 0x0048,       // u64
  kMtimeNs = 0x0049,    // u64, ns since the Unix epoch
  kEntry = 0x004a,      // nested, repeated (LIST)
  kEntryName = 0x004b,  // str, inside kEntry
  kUid = 0x004c,        // u32
  kGid = 0x004d,        // u32

  kHostname = 0x0050,       // str
  kCid = 0x0051,            // u64
  kGeneration = 0x0052,     // u64
  kBootId = 0x0053,         // bytes (16)
  kCpus = 0x0054,           // u32
  kMemoryBytes = 0x0055,    // u64
  kUptimeNs = 0x0056,       // u64
  kEntropySeed = 0x0057,    // bytes
  kWallClockNs = 0x0058,    // u64
  kEntropyDigest = 0x0059,  // u64
  kNicMac = 0x005a,         // bytes (6), the NIC's new MAC (POST_RESTORE)

  kSeed = 0x0060,      // u64
  kChecksum = 0x0061,  // u64

  kDisk = 0x0070,             // nested, repeated (DISK_INFO reply)
  kDiskIndex = 0x0071,        // u32, position in the DISK_INFO list
  kSector = 0x0072,           // u64, in 512-byte sectors
  kSectorCount = 0x0073,      // u32
  kCapacitySectors = 0x0074,  // u64
  kReadOnly = 0x0075,         // u8 bool
  kDiskId = 0x0076,           // str, the device's serial (virtio-blk GET_ID)
  kFlush = 0x0077,            // u8 bool

  kAsAgent = 0x0080,  // u8 bool: EXEC_START as the agent, without the image's defaults
};

enum class FileType : uint8_t { kFile = 1, kDirectory = 2, kSymlink = 3, kOther = 4 };
enum class OutputStream : uint8_t { kStdout = 1, kStderr = 2 };

// Error codes carried by ERROR frames; numerically equal to kubicle::StatusCode.
enum class ErrorCode : uint32_t {
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kOutOfRange = 4,
  kResourceExhausted = 5,
  kFailedPrecondition = 6,
  kUnavailable = 7,
  kDataLoss = 8,
  kDeadlineExceeded = 9,
  kPermissionDenied = 10,
  kUnimplemented = 11,
  kInternal = 12,
};

// Size limits on fields, enforced by every decoder.
inline constexpr uint32_t kMaxPathLen = 4096;
inline constexpr uint32_t kMaxNameLen = 256;       // names, versions, capabilities, entry names
inline constexpr uint32_t kMaxHostnameLen = 64;
inline constexpr uint32_t kMaxErrorMessageLen = 4096;
inline constexpr uint32_t kMaxArgs = 4096;         // argv and env entries each
inline constexpr uint32_t kMaxEntropyRead = 64 * 1024;
inline constexpr uint32_t kMaxEntropySeed = 4096;
inline constexpr uint32_t kBootIdLen = 16;
// Raw disk access (test-guest DISK_* messages): 512-byte sectors, at most one
// data chunk per frame, up to kMaxDisks entries in DISK_INFO.
inline constexpr uint32_t kDiskSectorSize = 512;
inline constexpr uint32_t kMaxDiskSectors = kMaxChunk / kDiskSectorSize;
inline constexpr uint32_t kMaxDiskIdLen = 20;  // VIRTIO_BLK_ID_BYTES
inline constexpr uint32_t kMaxDisks = 16;

// ---- Little-endian helpers ---------------------------------------------------

inline uint16_t LoadLe16(const uint8_t* p) { return uint16_t(p[0] | (uint16_t(p[1]) << 8)); }
inline uint32_t LoadLe32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline uint64_t LoadLe64(const uint8_t* p) {
  return uint64_t(LoadLe32(p)) | (uint64_t(LoadLe32(p + 4)) << 32);
}
inline void StoreLe16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void StoreLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void StoreLe64(uint8_t* p, uint64_t v) {
  StoreLe32(p, uint32_t(v));
  StoreLe32(p + 4, uint32_t(v >> 32));
}

// ---- Errors of the wire layer ------------------------------------------------

enum class WireError : uint8_t {
  kOk = 0,
  kTruncated,        // not enough bytes (header or TLV)
  kBadMagic,
  kTooLarge,         // payload length above kMaxPayload
  kBadTlvLength,     // a TLV length runs past the end of its container
  kBadValueLength,   // a fixed-width value has the wrong length
  kDuplicate,        // a singular field appears twice
  kNoSpace,          // a writer ran out of capacity
};

inline const char* WireErrorName(WireError e) {
  switch (e) {
    case WireError::kOk: return "ok";
    case WireError::kTruncated: return "truncated";
    case WireError::kBadMagic: return "bad magic";
    case WireError::kTooLarge: return "payload too large";
    case WireError::kBadTlvLength: return "TLV length overruns payload";
    case WireError::kBadValueLength: return "field has the wrong length";
    case WireError::kDuplicate: return "duplicate field";
    case WireError::kNoSpace: return "buffer too small";
  }
  return "unknown";
}

// ---- Frame header -------------------------------------------------------------
//
// offset size field
//  0     4    magic        kMagic
//  4     2    version      protocol version of this frame
//  6     2    type         MsgType
//  8     4    flags        kFlag*
// 12     4    id           request/stream id (0 = connection-level)
// 16     4    payload_len  bytes of TLV payload following the header
// 20     4    reserved     sent as 0, ignored on receipt
struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = kVersion1;
  uint16_t type = 0;
  uint32_t flags = 0;
  uint32_t id = 0;
  uint32_t payload_len = 0;
  uint32_t reserved = 0;
};

inline void EncodeHeader(const FrameHeader& h, uint8_t* out) {
  StoreLe32(out + 0, h.magic);
  StoreLe16(out + 4, h.version);
  StoreLe16(out + 6, h.type);
  StoreLe32(out + 8, h.flags);
  StoreLe32(out + 12, h.id);
  StoreLe32(out + 16, h.payload_len);
  StoreLe32(out + 20, 0);
}

// Decodes a header from the first `size` bytes of `data`. Checks magic and
// the absolute payload limit only; version, type and flags are the caller's
// (message-level) business so it can answer with a precise ERROR.
inline WireError DecodeHeader(const uint8_t* data, size_t size, FrameHeader* out) {
  if (size < kHeaderSize) return WireError::kTruncated;
  out->magic = LoadLe32(data + 0);
  out->version = LoadLe16(data + 4);
  out->type = LoadLe16(data + 6);
  out->flags = LoadLe32(data + 8);
  out->id = LoadLe32(data + 12);
  out->payload_len = LoadLe32(data + 16);
  out->reserved = LoadLe32(data + 20);
  if (out->magic != kMagic) return WireError::kBadMagic;
  if (out->payload_len > kMaxPayload) return WireError::kTooLarge;
  return WireError::kOk;
}

// ---- TLV ------------------------------------------------------------------------
//
// offset size field
//  0     2    tag
//  2     4    length   bytes of value
//  6     len  value
inline constexpr size_t kTlvHeaderSize = 6;

struct Tlv {
  uint16_t tag = 0;
  uint32_t length = 0;
  const uint8_t* value = nullptr;
};

// Iterates over a TLV sequence. Next() returns true and fills `out` for each
// field; at the end, or on a malformed field, it returns false and error()
// tells which (kOk at a clean end).
class TlvReader {
 public:
  constexpr TlvReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool Next(Tlv* out) {
    if (error_ != WireError::kOk || pos_ == size_) return false;
    if (size_ - pos_ < kTlvHeaderSize) {
      error_ = WireError::kTruncated;
      return false;
    }
    const uint16_t tag = LoadLe16(data_ + pos_);
    const uint32_t len = LoadLe32(data_ + pos_ + 2);
    const size_t rest = size_ - pos_ - kTlvHeaderSize;
    if (len > rest) {
      error_ = WireError::kBadTlvLength;
      return false;
    }
    out->tag = tag;
    out->length = len;
    out->value = data_ + pos_ + kTlvHeaderSize;
    pos_ += kTlvHeaderSize + len;
    return true;
  }
  WireError error() const { return error_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  WireError error_ = WireError::kOk;
};

// Walks a whole TLV sequence; kOk when it is well formed.
inline WireError ValidateTlvs(const uint8_t* data, size_t size) {
  TlvReader r(data, size);
  Tlv t;
  while (r.Next(&t)) {
  }
  return r.error();
}

enum class FindResult : uint8_t { kFound, kAbsent, kError };

// Finds the single field with `tag`. kError (with *err set) if the sequence
// is malformed or the tag appears more than once.
inline FindResult FindTlv(const uint8_t* data, size_t size, Tag tag, Tlv* out, WireError* err) {
  TlvReader r(data, size);
  Tlv t;
  bool found = false;
  while (r.Next(&t)) {
    if (t.tag != uint16_t(tag)) continue;
    if (found) {
      *err = WireError::kDuplicate;
      return FindResult::kError;
    }
    *out = t;
    found = true;
  }
  if (r.error() != WireError::kOk) {
    *err = r.error();
    return FindResult::kError;
  }
  return found ? FindResult::kFound : FindResult::kAbsent;
}

// Fixed-width value accessors: false when the length is not exact.
inline bool TlvU8(const Tlv& t, uint8_t* v) {
  if (t.length != 1) return false;
  *v = t.value[0];
  return true;
}
inline bool TlvU16(const Tlv& t, uint16_t* v) {
  if (t.length != 2) return false;
  *v = LoadLe16(t.value);
  return true;
}
inline bool TlvU32(const Tlv& t, uint32_t* v) {
  if (t.length != 4) return false;
  *v = LoadLe32(t.value);
  return true;
}
inline bool TlvU64(const Tlv& t, uint64_t* v) {
  if (t.length != 8) return false;
  *v = LoadLe64(t.value);
  return true;
}

// Appends TLVs to a caller-provided buffer. On overflow it latches kNoSpace and
// ignores further writes, so a sequence of Put calls needs one check at the end.
class TlvWriter {
 public:
  constexpr TlvWriter(uint8_t* buf, size_t cap) : buf_(buf), cap_(cap) {}

  void Put(Tag tag, const void* value, size_t len) {
    uint8_t* dst = Reserve(tag, len);
    if (dst == nullptr) return;
    const uint8_t* src = static_cast<const uint8_t*>(value);
    for (size_t i = 0; i < len; ++i) dst[i] = src[i];
  }
  // Reserves a field of `len` bytes and returns where to write its value (or
  // nullptr on overflow), so large values can be produced in place.
  uint8_t* Reserve(Tag tag, size_t len) {
    if (error_ != WireError::kOk) return nullptr;
    if (len > 0xffffffffu || cap_ - len_ < kTlvHeaderSize || cap_ - len_ - kTlvHeaderSize < len) {
      error_ = WireError::kNoSpace;
      return nullptr;
    }
    StoreLe16(buf_ + len_, uint16_t(tag));
    StoreLe32(buf_ + len_ + 2, uint32_t(len));
    uint8_t* dst = buf_ + len_ + kTlvHeaderSize;
    len_ += kTlvHeaderSize + len;
    return dst;
  }
  void PutU8(Tag tag, uint8_t v) { Put(tag, &v, 1); }
  void PutU16(Tag tag, uint16_t v) {
    uint8_t b[2];
    StoreLe16(b, v);
    Put(tag, b, 2);
  }
  void PutU32(Tag tag, uint32_t v) {
    uint8_t b[4];
    StoreLe32(b, v);
    Put(tag, b, 4);
  }
  void PutU64(Tag tag, uint64_t v) {
    uint8_t b[8];
    StoreLe64(b, v);
    Put(tag, b, 8);
  }
  // Puts a NUL-terminated string (without the NUL).
  void PutCStr(Tag tag, const char* s) {
    size_t n = 0;
    while (s[n] != '\0') ++n;
    Put(tag, s, n);
  }

  // Nested TLV: BeginNested returns a marker; write the inner fields, then
  // EndNested(marker) fixes up the container's length.
  size_t BeginNested(Tag tag) {
    const size_t mark = len_;
    Reserve(tag, 0);
    return mark;
  }
  void EndNested(size_t mark) {
    if (error_ != WireError::kOk) return;
    StoreLe32(buf_ + mark + 2, uint32_t(len_ - mark - kTlvHeaderSize));
  }

  size_t size() const { return len_; }
  WireError error() const { return error_; }

 private:
  uint8_t* buf_;
  size_t cap_;
  size_t len_ = 0;
  WireError error_ = WireError::kOk;
};

// ---- Test-guest memory pattern and checksum ----------------------------------
//
// MEM_FILL writes little-endian u64 word i of the area as
//   (seed + i) * kMemPatternMultiplier            (mod 2^64)
// MEM_CHECKSUM over words w_0..w_{n-1}: a = sum(w_i), b = sum of the running
// a after each word (Fletcher-style, mod 2^64); checksum = b ^ rotl64(a, 32).
// Two adds per word: cheap even when every guest instruction is emulated.
inline constexpr uint64_t kMemPatternMultiplier = 0x9E3779B97F4A7C15ull;

inline uint64_t MemPatternWord(uint64_t seed, uint64_t index) {
  return (seed + index) * kMemPatternMultiplier;
}

struct MemChecksumState {
  uint64_t a = 0;
  uint64_t b = 0;
  void Update(const uint64_t* words, size_t count) {
    uint64_t x = a, y = b;
    for (size_t i = 0; i < count; ++i) {
      x += words[i];
      y += x;
    }
    a = x;
    b = y;
  }
  uint64_t Final() const { return b ^ ((a << 32) | (a >> 32)); }
};

// FNV-1a 64, used for the test guest's entropy digest.
inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnvPrime = 0x100000001b3ull;
inline uint64_t Fnv1a64(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace kubicle::guest::protocol
