// Connection: one agent-protocol stream (vsock or Unix socket) inside
// kubicle-agent: framing, bounded receive and transmit buffers, backpressure
// and fair scheduling of streamed replies.
//
// Contracts:
//  - Receive side: at most one frame header plus kMaxPayload bytes are
//    buffered. A bad magic or a payload length above kMaxPayload loses the
//    framing: the connection sends a connection-level ERROR (id 0), stops
//    reading and closes once that ERROR is flushed (or after a grace time).
//    That ERROR is the last frame sent: streamed replies and exec output
//    stop there.
//    Every other problem is the message layer's to answer with an ERROR.
//  - Transmit side: Send() never blocks. Frames queue in memory; Congested()
//    turns true above kHighWater, and while it is true the connection stops
//    reading requests, Producers are not pumped and exec output is not read
//    (the Sink's OnDrained() is called once the queue falls below kLowWater).
//    So memory per connection stays bounded no matter what the peer does.
//  - A payload larger than the peer's advertised limit is never sent: it is
//    replaced by an ERROR (ResourceExhausted) for the same id.
//  - Close() is idempotent; the Sink's OnClosed() runs once, and the owner
//    destroys the object later (through Loop::Defer), never inside a handler.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "guest/agent/loop.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"

namespace kubicle::guest::agent {

namespace protocol = ::kubicle::guest::protocol;
class Connection;

// Produces one frame of a streamed reply per call (FILE_READ, LIST).
class Producer {
 public:
  virtual ~Producer() = default;
  // Sends at most one frame on `c`; returns true when the stream is finished.
  virtual bool Produce(Connection& c) = 0;
};

class ConnectionSink {
 public:
  virtual void OnFrame(Connection& c, protocol::Frame frame) = 0;
  virtual void OnDrained(Connection& c) = 0;
  virtual void OnClosed(Connection& c) = 0;

 protected:
  ~ConnectionSink() = default;
};

class Connection {
 public:
  static constexpr size_t kHighWater = 2u << 20;
  static constexpr size_t kLowWater = 512u << 10;

  Connection(Loop* loop, UniqueFd fd, std::string peer, ConnectionSink* sink);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Status Start();
  const std::string& peer() const { return peer_; }
  uint64_t serial() const { return serial_; }

  // Negotiated by HELLO; replies use this version (HELLO replies use 1).
  uint16_t version() const { return version_; }
  uint32_t peer_max_payload() const { return peer_max_payload_; }
  void SetNegotiated(uint16_t version, uint32_t peer_max_payload) {
    version_ = version;
    peer_max_payload_ = peer_max_payload;
  }
  // Largest data chunk that fits one frame for this peer.
  size_t MaxChunk() const;

  // Queues a frame (kFlagReply is added). Oversized payloads become ERRORs.
  void Send(protocol::MsgType type, uint32_t id, uint32_t flags, std::vector<uint8_t> payload);
  template <typename M>
  void Reply(const M& msg, uint32_t id, uint32_t flags = 0) {
    Send(M::kType, id, flags, msg.Encode());
  }
  void SendError(uint32_t id, const Status& status);

  bool Congested() const { return tx_bytes_ > kHighWater; }
  size_t tx_bytes() const { return tx_bytes_; }
  void AddProducer(std::unique_ptr<Producer> p);
  // Nested pause requests (e.g. an exec's stdin buffer is full): reading
  // resumes when every pause is released.
  void PauseReading() { ++read_pauses_; UpdateInterest(); }
  void ResumeReading();

  void Close(const std::string& reason);
  bool closed() const { return closed_; }

 private:
  void OnEvents(uint32_t events);
  void ReadSome();
  void ParseFrames();
  void ParseLoop();
  void Flush();
  void Pump();
  void UpdateInterest();
  void FatalFramingError(const std::string& why);

  Loop* loop_;
  UniqueFd fd_;
  std::string peer_;
  ConnectionSink* sink_;
  uint64_t serial_;
  Loop::Token token_ = 0;
  Loop::Token grace_timer_ = 0;
  uint16_t version_ = protocol::kVersion1;
  uint32_t peer_max_payload_ = protocol::kMaxPayload;

  std::vector<uint8_t> rx_;
  size_t rx_start_ = 0;
  std::deque<std::vector<uint8_t>> tx_;
  size_t tx_front_off_ = 0;
  size_t tx_bytes_ = 0;
  bool was_congested_ = false;
  std::list<std::unique_ptr<Producer>> producers_;
  bool pumping_ = false;
  bool parsing_ = false;
  int read_pauses_ = 0;
  bool draining_to_close_ = false;  // framing lost: flush the ERROR, then close
  bool closed_ = false;
};

}  // namespace kubicle::guest::agent
