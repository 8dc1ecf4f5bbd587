// FakeAgent: a scripted guest agent on one end of a socketpair, for the
// AgentClient tests (friendly and hostile). It answers HELLO itself and hands
// every other frame to a handler on its own thread; the handler replies with
// Reply()/SendRaw(), or starts a Spawn()ed thread to keep sending (floods).
//
// Sends are serialised (frames never interleave) and block when the client
// does not read, as a guest's vsock does. TrySend reports a closed peer
// instead of failing the test, so floods end when the client goes away.
// The destructor shuts the socket down and joins every thread.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/unique_fd.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"

namespace kubicle::guest::client::test_util {

using protocol::Bytes;
using protocol::Frame;
using protocol::MsgType;

class FakeAgent {
 public:
  using Handler = std::function<void(FakeAgent&, const Frame&)>;
  FakeAgent(UniqueFd fd, Handler on_frame, uint32_t max_payload = protocol::kMaxPayload)
      : fd_(std::move(fd)), on_frame_(std::move(on_frame)), max_payload_(max_payload) {
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeAgent() {
    Close();
    thread_.join();
    for (auto& t : spawned_) t.join();
  }
  void Close() { ::shutdown(fd_.get(), SHUT_RDWR); }

  template <typename M>
  static Bytes Encode(const M& msg, uint32_t id, uint32_t flags = 0) {
    return *protocol::EncodeFrame(protocol::MakeFrame(msg, id, flags | protocol::kFlagReply));
  }
  template <typename M>
  void Reply(const M& msg, uint32_t id, uint32_t flags = 0) {
    SendRaw(Encode(msg, id, flags));
  }
  void SendRaw(const Bytes& b) { ASSERT_TRUE(TrySend(b)) << "fake agent: send failed"; }
  // False once the client hung up (or Close() ran).
  bool TrySend(const Bytes& b) {
    std::lock_guard l(send_mu_);
    size_t off = 0;
    while (off < b.size()) {
      const ssize_t n = ::send(fd_.get(), b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Runs `fn` on a new thread (joined by the destructor). Only from the
  // handler, which runs on the agent's thread.
  void Spawn(std::function<void()> fn) { spawned_.emplace_back(std::move(fn)); }

  std::vector<size_t> payload_sizes;  // of every non-HELLO frame received

 private:
  void Run() {
    protocol::FrameDecoder dec;
    uint8_t buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n <= 0) return;
      dec.Append(protocol::ByteSpan(buf, size_t(n)));
      for (;;) {
        auto f = dec.Next();
        if (!f.ok() || !f->has_value()) break;
        if ((*f)->type == MsgType::kHello) {
          protocol::HelloReply h;
          h.name = "fake";
          h.capabilities = {"exec", "files"};
          h.max_payload = max_payload_;
          Reply(h, (*f)->id);
          continue;
        }
        payload_sizes.push_back((*f)->payload.size());
        on_frame_(*this, **f);
      }
    }
  }

  UniqueFd fd_;
  Handler on_frame_;
  uint32_t max_payload_;
  std::mutex send_mu_;
  std::vector<std::thread> spawned_;
  std::thread thread_;
};

inline std::pair<UniqueFd, UniqueFd> SocketPair() {
  int sv[2];
  EXPECT_EQ(0, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

}  // namespace kubicle::guest::client::test_util
