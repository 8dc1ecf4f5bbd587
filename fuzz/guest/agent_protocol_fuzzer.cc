// Fuzzes the agent protocol codec both sides use (guest/protocol): the host's
// AgentClient decodes replies with it and the Linux guest agent
// (guest/agent), which compiles the same sources, decodes requests with it.
//
// Every input is used twice:
//  - as a byte stream through FrameDecoder, cut into chunks whose sizes the
//    first byte picks; every frame it yields is decoded as the request and
//    the reply of its type;
//  - as one payload (after a u16 message type) decoded by every decoder of
//    that type.
// Checked: nothing crashes; FrameDecoder errors are sticky; a payload that
// decodes re-encodes to bytes that decode to the same encoding (Encode and
// Decode agree).
#include <algorithm>
#include <cstring>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"
#include "guest/protocol/tlv.h"

namespace kubicle::fuzz {
namespace {

namespace p = guest::protocol;
using p::MsgType;

template <typename M>
void RoundTrip(p::ByteSpan payload) {
  auto m = M::Decode(payload);
  if (!m.ok()) return;
  const p::Bytes once = m->Encode();
  auto again = M::Decode(once);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->Encode() == once);
}

template <typename... M>
void All(p::ByteSpan payload) {
  (RoundTrip<M>(payload), ...);
}

void DecodeAs(MsgType type, p::ByteSpan payload) {
  switch (type) {
    case MsgType::kHello: return All<p::HelloRequest, p::HelloReply>(payload);
    case MsgType::kPing: return All<p::PingRequest>(payload);
    case MsgType::kPong: return All<p::PongReply>(payload);
    case MsgType::kEcho: return All<p::EchoMessage>(payload);
    case MsgType::kError: return All<p::ErrorReply>(payload);
    case MsgType::kExecStart: return All<p::ExecStartRequest, p::ExecStartReply>(payload);
    case MsgType::kExecStdin: return All<p::ExecStdinChunk>(payload);
    case MsgType::kExecOutput: return All<p::ExecOutputChunk>(payload);
    case MsgType::kExecExit: return All<p::ExecExitReply>(payload);
    case MsgType::kExecSignal: return All<p::ExecSignalRequest, p::EmptyMessage>(payload);
    case MsgType::kFileWrite: return All<p::FileWriteChunk, p::FileWriteReply>(payload);
    case MsgType::kFileRead: return All<p::FileReadRequest, p::FileReadChunk>(payload);
    case MsgType::kStat: return All<p::StatRequest, p::StatReply>(payload);
    case MsgType::kList: return All<p::ListRequest, p::ListReply>(payload);
    case MsgType::kMkdir: return All<p::MkdirRequest, p::EmptyMessage>(payload);
    case MsgType::kRemove: return All<p::RemoveRequest>(payload);
    case MsgType::kChmod: return All<p::ChmodRequest>(payload);
    case MsgType::kIdentity: return All<p::IdentityRequest, p::IdentityReply>(payload);
    case MsgType::kPostRestore: return All<p::PostRestoreRequest, p::PostRestoreReply>(payload);
    case MsgType::kMemFill: return All<p::MemFillRequest, p::MemFillReply>(payload);
    case MsgType::kMemChecksum: return All<p::MemChecksumRequest, p::MemChecksumReply>(payload);
    case MsgType::kEntropyRead: return All<p::EntropyReadRequest, p::EntropyReadReply>(payload);
    case MsgType::kDiskInfo: return All<p::DiskInfoRequest, p::DiskInfoReply>(payload);
    case MsgType::kDiskRead: return All<p::DiskReadRequest, p::DiskReadReply>(payload);
    case MsgType::kDiskWrite: return All<p::DiskWriteRequest, p::DiskWriteReply>(payload);
  }
  // An unknown type: the generic field reader still parses what it can.
  p::FieldReader r(payload);
  (void)r.Str(p::Tag::kPath, p::kMaxPathLen);
  (void)r.StrList(p::Tag::kArgv, p::kMaxPathLen, p::kMaxArgs);
  (void)r.NestedList(p::Tag::kEntry, 1024);
}

void Stream(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const size_t chunk = 1 + data[0] % 64;
  p::FrameDecoder dec;
  bool failed = false;
  for (size_t off = 1; off < size; off += chunk) {
    dec.Append({data + off, std::min(chunk, size - off)});
    while (true) {
      auto f = dec.Next();
      if (!f.ok()) {
        failed = true;
        break;
      }
      FUZZ_CHECK(!failed);  // errors are sticky
      if (!f->has_value()) break;
      DecodeAs((*f)->type, (*f)->payload);
      // What was decoded re-frames identically.
      auto bytes = p::EncodeFrame(**f);
      FUZZ_CHECK(bytes.ok());
    }
    if (failed) {
      FUZZ_CHECK(!dec.Next().ok());
      return;
    }
  }
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  Stream(data, size);
  if (size >= 2) {
    uint16_t type;
    std::memcpy(&type, data, 2);
    DecodeAs(static_cast<p::MsgType>(type), {data + 2, size - 2});
  }
  return 0;
}
