// Session: one agent-protocol connection inside the test guest. It buffers
// received stream bytes, cuts them into frames, lets the Agent answer each
// frame, and holds the reply bytes until the transport (vsock, or a socket in
// host tests) takes them.
//
// Contracts:
//  - Receive(n) requires n <= RxFree(); the transport's flow control (vsock
//    credit with buf_alloc = kRxCap) guarantees it.
//  - Process() answers frames only while the TX buffer has room for the
//    largest reply, so replies never overflow and a slow reader exerts
//    backpressure; it returns the number of RX bytes consumed (the vsock
//    fwd_cnt advance).
//  - Hostile input: a bad magic or a payload above 1 MiB loses the framing:
//    the session queues a connection-level ERROR (id 0) and asks to be closed.
//    A frame above kMaxRxPayload but within 1 MiB is skipped with an ERROR
//    for its id and the connection stays usable; so does any malformed
//    payload (the Agent answers ERROR).
//  - No constructor work: sessions live in static storage in the guest, and
//    the large buffers are attached separately so they need no zeroing.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "guest/protocol/wire.h"

namespace kubicle::guest::testguest {

namespace wire = ::kubicle::guest::protocol;
class Agent;

class Session {
 public:
  static constexpr uint32_t kRxCap = 72 * 1024;
  static constexpr uint32_t kMaxRxPayload = kRxCap - wire::kHeaderSize;  // advertised in HELLO
  // Largest frame one request can produce (ECHO of kMaxRxPayload, FILE_READ).
  static constexpr uint32_t kMaxReply = kRxCap + 1024;
  static constexpr uint32_t kTxCap = 2 * kMaxReply;

  // Gives the session its buffers (kRxCap and kTxCap bytes; contents need no
  // initialisation). Must be called once before use.
  void Attach(uint8_t* rx, uint8_t* tx) {
    rx_ = rx;
    tx_ = tx;
  }
  // Forgets everything (new connection). Releases the agent resources the
  // session held (a half-written file).
  void Reset(Agent* agent);

  uint32_t RxFree() const { return kRxCap - rx_len_; }
  uint32_t RxBuffered() const { return rx_len_; }
  void Receive(const uint8_t* data, uint32_t n);
  uint32_t Process(Agent* agent);
  // True when the session hit a fatal framing error (after its ERROR is sent).
  bool close_requested() const { return close_; }
  // True when a complete frame is buffered but waits for TX room.
  bool HasCompleteFrame() const;

  const uint8_t* TxData() const { return tx_ + tx_start_; }
  uint32_t TxSize() const { return tx_end_ - tx_start_; }
  void TxConsume(uint32_t n);

  // ---- Used by the Agent while answering one frame ----
  // Starts a reply frame in the TX buffer; returns a writer for its payload,
  // limited by the peer's max_payload.
  wire::TlvWriter* BeginReply(wire::MsgType type, uint32_t flags, uint32_t id);
  // Finishes the frame; if the payload overflowed it becomes an ERROR.
  void EndReply();
  void SendError(uint32_t id, wire::ErrorCode code, const char* message);

  uint16_t version() const { return version_; }
  uint32_t peer_max_payload() const { return peer_max_payload_; }
  void SetNegotiated(uint16_t version, uint32_t peer_max_payload) {
    version_ = version;
    peer_max_payload_ = peer_max_payload;
  }

  // FILE_WRITE stream state, owned by the agent's file code.
  struct WriteStream {
    // Failed streams whose remaining chunks are ignored until their last
    // one (0 = free slot). Several: a refused stream must stay quiet while
    // others fail too (more than this many at once: the oldest is
    // forgotten, and its next chunk is refused again).
    static constexpr uint32_t kMaxDropping = 8;
    bool active = false;
    uint32_t id = 0;
    int slot = -1;
    uint64_t received = 0;
    uint32_t dropping[kMaxDropping] = {};
    uint32_t next_drop = 0;  // the slot to reuse when all are taken

    bool IsDropping(uint32_t drop_id) const {
      for (uint32_t d : dropping) {
        if (d == drop_id) return true;
      }
      return false;
    }
    void StartDropping(uint32_t drop_id) {
      if (IsDropping(drop_id)) return;
      for (uint32_t& d : dropping) {
        if (d == 0) {
          d = drop_id;
          return;
        }
      }
      dropping[next_drop] = drop_id;
      next_drop = (next_drop + 1) % kMaxDropping;
    }
    void StopDropping(uint32_t drop_id) {
      for (uint32_t& d : dropping) {
        if (d == drop_id) d = 0;
      }
    }
  };
  WriteStream& write_stream() { return write_; }

 private:
  void Drop(uint32_t n);
  uint32_t TxFree() const { return kTxCap - TxSize(); }

  uint8_t* rx_ = nullptr;
  uint32_t rx_len_ = 0;
  uint8_t* tx_ = nullptr;
  uint32_t tx_start_ = 0;
  uint32_t tx_end_ = 0;
  uint32_t skip_ = 0;  // payload bytes of an oversized frame still to discard
  bool close_ = false;
  uint16_t version_ = wire::kVersion1;
  uint32_t peer_max_payload_ = wire::kMaxPayload;

  // The reply being built.
  uint32_t reply_at_ = 0;
  uint32_t reply_id_ = 0;
  uint16_t reply_type_ = 0;
  uint32_t reply_flags_ = 0;
  wire::TlvWriter writer_{nullptr, 0};

  WriteStream write_;
};

}  // namespace kubicle::guest::testguest
