#include "guest/protocol/frame.h"

#include <cstdio>
#include <cstring>

namespace kubicle::guest::protocol {

Result<std::vector<uint8_t>> EncodeFrame(const Frame& frame) {
  if (frame.payload.size() > kMaxPayload) {
    return Status::InvalidArgument("payload of " + std::to_string(frame.payload.size()) +
                                   " bytes exceeds the frame limit");
  }
  std::vector<uint8_t> out(kHeaderSize + frame.payload.size());
  FrameHeader h;
  h.version = frame.version;
  h.type = uint16_t(frame.type);
  h.flags = frame.flags;
  h.id = frame.id;
  h.payload_len = uint32_t(frame.payload.size());
  EncodeHeader(h, out.data());
  if (!frame.payload.empty()) {
    std::memcpy(out.data() + kHeaderSize, frame.payload.data(), frame.payload.size());
  }
  return out;
}

std::string MsgTypeName(MsgType type) {
  switch (type) {
    case MsgType::kHello: return "HELLO";
    case MsgType::kPing: return "PING";
    case MsgType::kPong: return "PONG";
    case MsgType::kEcho: return "ECHO";
    case MsgType::kError: return "ERROR";
    case MsgType::kExecStart: return "EXEC_START";
    case MsgType::kExecStdin: return "EXEC_STDIN";
    case MsgType::kExecOutput: return "EXEC_OUTPUT";
    case MsgType::kExecExit: return "EXEC_EXIT";
    case MsgType::kExecSignal: return "EXEC_SIGNAL";
    case MsgType::kFileWrite: return "FILE_WRITE";
    case MsgType::kFileRead: return "FILE_READ";
    case MsgType::kStat: return "STAT";
    case MsgType::kList: return "LIST";
    case MsgType::kMkdir: return "MKDIR";
    case MsgType::kRemove: return "REMOVE";
    case MsgType::kChmod: return "CHMOD";
    case MsgType::kIdentity: return "IDENTITY";
    case MsgType::kPostRestore: return "POST_RESTORE";
    case MsgType::kMemFill: return "MEM_FILL";
    case MsgType::kMemChecksum: return "MEM_CHECKSUM";
    case MsgType::kEntropyRead: return "ENTROPY_READ";
    case MsgType::kDiskInfo: return "DISK_INFO";
    case MsgType::kDiskRead: return "DISK_READ";
    case MsgType::kDiskWrite: return "DISK_WRITE";
  }
  char buf[16];
  std::snprintf(buf, sizeof(buf), "type 0x%04x", unsigned(type));
  return buf;
}

FrameDecoder::FrameDecoder(uint32_t max_payload)
    : max_payload_(max_payload > kMaxPayload ? kMaxPayload : max_payload) {}

void FrameDecoder::Append(std::span<const uint8_t> bytes) {
  // Compact lazily so a long stream of small frames does not copy per frame.
  if (start_ > 0 && (start_ == buf_.size() || start_ > 64 * 1024)) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  buf_.insert(buf_.end(), bytes.begin(), bytes.end());
}

Result<std::optional<Frame>> FrameDecoder::Next() {
  if (!error_.ok()) return error_;
  const uint8_t* p = buf_.data() + start_;
  const size_t avail = buf_.size() - start_;
  FrameHeader h;
  WireError e = DecodeHeader(p, avail, &h);
  if (e == WireError::kTruncated) {
    // A wrong magic is visible before the whole header arrives: fail early.
    if (avail >= 4 && LoadLe32(p) != kMagic) e = WireError::kBadMagic;
    if (e == WireError::kTruncated) return std::optional<Frame>();
  }
  if (e == WireError::kOk && h.payload_len > max_payload_) e = WireError::kTooLarge;
  if (e != WireError::kOk) {
    error_ = Status::DataLoss(std::string("corrupt frame stream: ") + WireErrorName(e) +
                              (e == WireError::kTooLarge
                                   ? " (" + std::to_string(h.payload_len) + " bytes)"
                                   : std::string()));
    return error_;
  }
  if (avail - kHeaderSize < h.payload_len) return std::optional<Frame>();
  Frame f;
  f.type = MsgType(h.type);
  f.flags = h.flags;
  f.id = h.id;
  f.version = h.version;
  f.payload.assign(p + kHeaderSize, p + kHeaderSize + h.payload_len);
  start_ += kHeaderSize + h.payload_len;
  return std::optional<Frame>(std::move(f));
}

}  // namespace kubicle::guest::protocol
