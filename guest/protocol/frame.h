// Host-side framing: Frame (header fields plus an owned payload), EncodeFrame,
// and FrameDecoder, which cuts a byte stream into frames.
//
// FrameDecoder treats the stream as hostile: a bad magic or a payload length
// above the receive limit is a stream error (sticky: the framing is lost and
// the connection must be closed). Version, type and flags are not judged here;
// that is the message layer's job so it can answer with a precise ERROR.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "guest/protocol/wire.h"

namespace kubicle::guest::protocol {

struct Frame {
  MsgType type = MsgType::kPing;
  uint32_t flags = 0;
  uint32_t id = 0;
  uint16_t version = kVersion1;
  std::vector<uint8_t> payload;

  bool is_reply() const { return (flags & kFlagReply) != 0; }
  bool has_more() const { return (flags & kFlagMore) != 0; }
};

// Header + payload. InvalidArgument when the payload exceeds kMaxPayload.
Result<std::vector<uint8_t>> EncodeFrame(const Frame& frame);

// Name of a message type for logs and errors ("EXEC_START", "type 0x1234").
std::string MsgTypeName(MsgType type);

class FrameDecoder {
 public:
  // max_payload: this side's receive limit (<= kMaxPayload).
  explicit FrameDecoder(uint32_t max_payload = kMaxPayload);

  void Append(std::span<const uint8_t> bytes);
  // The next complete frame, nullopt when more bytes are needed, or an error
  // when the stream is corrupt (every later call returns the same error).
  Result<std::optional<Frame>> Next();
  // Bytes received but not yet returned as frames.
  size_t buffered() const { return buf_.size() - start_; }

 private:
  uint32_t max_payload_;
  std::vector<uint8_t> buf_;
  size_t start_ = 0;
  Status error_;
};

}  // namespace kubicle::guest::protocol
