// AgentClient against hostile agents: what the host holds stays within
// ClientLimits whatever the agent sends (floods, endless continuation frames,
// oversize frames, a caller that stops consuming).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include "guest/client/agent_client.h"
#include "guest/client/fake_agent_test_util.h"

namespace kubicle::guest::client {
namespace {

using namespace std::chrono_literals;
using protocol::Frame;
using protocol::MsgType;
using protocol::OutputStream;
using test_util::FakeAgent;
using test_util::SocketPair;

constexpr uint64_t kMiB = 1ull << 20;

// Peak RSS growth of this process since construction, in bytes; nullopt
// where the kernel cannot reset the peak (/proc/self/clear_refs "5") or
// under ASan.
class PeakRss {
 public:
  PeakRss() {
#if defined(__SANITIZE_ADDRESS__)
    return;  // ASan's quarantine keeps freed memory resident: no bound to check
#endif
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    ok_ = bool(clear);
    start_ = Field("VmRSS:");
  }
  std::optional<uint64_t> Growth() const {
    if (!ok_) return std::nullopt;
    const uint64_t hwm = Field("VmHWM:");
    return hwm > start_ ? hwm - start_ : 0;
  }

 private:
  static uint64_t Field(const char* name) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(name, 0) == 0) return std::stoull(line.substr(std::strlen(name))) * 1024;
    }
    return 0;
  }
  bool ok_ = false;
  uint64_t start_ = 0;
};

void ExpectBelow(const PeakRss& rss, uint64_t limit) {
  auto g = rss.Growth();
  if (!g) {
    ::testing::Test::RecordProperty("peak_rss", "not measured (no VmHWM reset, or ASan)");
    return;
  }
  EXPECT_LT(*g, limit) << "peak RSS grew by " << (*g >> 20) << " MiB";
}

Bytes Chunk(size_t n, uint8_t fill) { return Bytes(n, fill); }

std::unique_ptr<AgentClient> Connect(UniqueFd fd, ClientLimits limits, uint32_t max_payload = 0) {
  ClientOptions o;
  o.limits = limits;
  if (max_payload != 0) o.max_payload = max_payload;
  auto c = AgentClient::Adopt(std::move(fd), o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(AgentClientLimits, FloodedExecOutputIsCappedAndTheRestDrained) {
  constexpr uint64_t kFlood = 64 * kMiB;
  auto [a, b] = SocketPair();
  std::atomic<uint64_t> limit_sent{0};
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) {
    if (f.type != MsgType::kExecStart) return;
    limit_sent = protocol::ExecStartRequest::Decode(f.payload)->output_limit;
    ag.Reply(protocol::ExecStartReply{7}, f.id, protocol::kFlagMore);
    ag.Spawn([&ag, id = f.id] {
      const Bytes out = FakeAgent::Encode(
          protocol::ExecOutputChunk{OutputStream::kStdout, Chunk(protocol::kMaxChunk, 'o')}, id,
          protocol::kFlagMore);
      for (uint64_t sent = 0; sent < kFlood; sent += protocol::kMaxChunk) {
        if (!ag.TrySend(out)) return;
      }
      ag.Reply(protocol::ExecOutputChunk{OutputStream::kStderr, Chunk(100, 'e')}, id,
               protocol::kFlagMore);
      protocol::ExecExitReply exit;
      exit.exit_code = 0;
      ag.Reply(exit, id);
    });
  });
  ClientLimits lim;
  lim.max_exec_output_per_stream = 1 * kMiB;
  auto c = Connect(std::move(a), lim);
  ASSERT_TRUE(c);
  PeakRss rss;
  protocol::ExecStartRequest req;
  req.argv = {"yes"};
  auto r = c->Exec(req, {}, DeadlineIn(60s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(r->stdout_data, Chunk(kMiB, 'o'));
  EXPECT_EQ(r->stderr_data, Chunk(100, 'e'));
  EXPECT_EQ(r->discarded_bytes, kFlood - kMiB);
  // An honest agent is told not to send what would be dropped.
  EXPECT_EQ(limit_sent.load(), 2 * kMiB);
  ExpectBelow(rss, 24 * kMiB);
}

TEST(AgentClientLimits, OutputLimitHoldsWhenTheAgentIgnoresIt) {
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame& f) {
    if (f.type != MsgType::kExecStart) return;
    ag.Reply(protocol::ExecStartReply{7}, f.id, protocol::kFlagMore);
    ag.Reply(protocol::ExecOutputChunk{OutputStream::kStdout, Chunk(600, 'o')}, f.id,
             protocol::kFlagMore);
    ag.Reply(protocol::ExecOutputChunk{OutputStream::kStderr, Chunk(600, 'e')}, f.id,
             protocol::kFlagMore);
    protocol::ExecExitReply exit;
    exit.exit_code = 0;
    ag.Reply(exit, f.id);  // and claims nothing was truncated
  });
  auto c = Connect(std::move(a), {});
  ASSERT_TRUE(c);
  protocol::ExecStartRequest req;
  req.argv = {"x"};
  req.output_limit = 1000;
  auto r = c->Exec(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data.size(), 600u);
  EXPECT_EQ(r->stderr_data.size(), 400u);
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(r->discarded_bytes, 200u);
}

// Sends LIST continuation frames (MORE set) until the client hangs up.
void FloodList(FakeAgent& ag, const Frame& f, size_t entries_per_frame) {
  if (f.type == MsgType::kPing) {
    ag.Reply(protocol::PongReply{protocol::PingRequest::Decode(f.payload)->nonce}, f.id);
    return;
  }
  if (f.type != MsgType::kList) return;
  protocol::ListReply part;
  for (size_t i = 0; i < entries_per_frame; ++i) {
    part.entries.push_back({"f" + std::to_string(i), protocol::FileType::kFile, 1, 0644, 0});
  }
  ag.Spawn([&ag, frame = FakeAgent::Encode(part, f.id, protocol::kFlagMore)] {
    while (ag.TrySend(frame)) {
    }
  });
}

TEST(AgentClientLimits, EndlessEmptyListFramesFailOnTheByteCap) {
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame& f) { FloodList(ag, f, 0); });
  ClientLimits lim;
  lim.max_list_bytes = 1 * kMiB;
  auto c = Connect(std::move(a), lim);
  ASSERT_TRUE(c);
  auto l = c->List("/d", DeadlineIn(30s));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kResourceExhausted) << l.status().ToString();
  EXPECT_NE(l.status().message().find("bytes"), std::string::npos) << l.status().ToString();
  // The rest of the flood is for a request nobody waits on: dropped.
  EXPECT_TRUE(c->Ping(DeadlineIn(10s)).ok());
  EXPECT_TRUE(c->health().ok());
}

TEST(AgentClientLimits, EndlessListEntriesFailOnTheEntryCap) {
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame& f) { FloodList(ag, f, 100); });
  ClientLimits lim;
  lim.max_list_entries = 1000;
  auto c = Connect(std::move(a), lim);
  ASSERT_TRUE(c);
  PeakRss rss;
  auto l = c->List("/d", DeadlineIn(30s));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(l.status().message().find("1000 entries"), std::string::npos) << l.status().ToString();
  ExpectBelow(rss, 16 * kMiB);
}

TEST(AgentClientLimits, FrameAboveOurReceiveLimitClosesTheSession) {
  auto [a, b] = SocketPair();
  std::promise<void> closed;
  FakeAgent agent(
      std::move(b),
      [&](FakeAgent& ag, const Frame& f) {
        if (f.type != MsgType::kEcho) return;
        ag.Reply(protocol::EchoMessage{Chunk(8000, 'x')}, f.id);  // within 1 MiB, above 4096
        ag.Spawn([&ag, &closed] {
          const Bytes ping = FakeAgent::Encode(protocol::PongReply{1}, 99);
          const auto until = Clock::now() + 10s;
          while (Clock::now() < until && ag.TrySend(ping)) std::this_thread::sleep_for(1ms);
          closed.set_value();
        });
      },
      4096);
  auto c = Connect(std::move(a), {}, 4096);
  ASSERT_TRUE(c);
  auto e = c->Echo(Bytes{1}, DeadlineIn(10s));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(e.status().message().find("too large"), std::string::npos) << e.status().ToString();
  EXPECT_FALSE(c->health().ok());
  EXPECT_EQ(c->Ping(DeadlineIn(1s)).code(), StatusCode::kUnavailable);
  // The host shut the socket: the agent's next sends fail.
  EXPECT_EQ(closed.get_future().wait_for(10s), std::future_status::ready);
}

// Serves FILE_READ of a synthetic file of `size` bytes (byte i = i % 251)
// in kMaxChunk frames, without holding it.
void ServeFile(FakeAgent& ag, const Frame& f, uint64_t size, bool send_size) {
  if (f.type != MsgType::kFileRead) return;
  ag.Spawn([&ag, id = f.id, size, send_size] {
    uint64_t off = 0;
    do {
      protocol::FileReadChunk rc;
      rc.offset = off;
      const uint64_t n = std::min<uint64_t>(protocol::kMaxChunk, size - off);
      rc.data.resize(n);
      for (uint64_t i = 0; i < n; ++i) rc.data[i] = uint8_t((off + i) % 251);
      if (off == 0 && send_size) rc.size = size;
      off += n;
      if (!ag.TrySend(FakeAgent::Encode(rc, id, off < size ? protocol::kFlagMore : 0))) return;
    } while (off < size);
  });
}

TEST(AgentClientLimits, StreamedReadDeliversEveryChunkWithBoundedMemory) {
  constexpr uint64_t kSize = 96 * kMiB + 123;
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame& f) {
    ServeFile(ag, f, kSize, true);
  });
  auto c = Connect(std::move(a), {});
  ASSERT_TRUE(c);
  PeakRss rss;
  uint64_t got = 0;
  size_t chunks = 0;
  bool bad = false;
  std::optional<uint64_t> size;
  Status s = c->ReadFileStream(
      "/big",
      [&](const FileChunk& ch) {
        if (chunks++ == 0) size = ch.file_size;
        if (ch.offset != got || ch.data.size() > protocol::kMaxChunk) bad = true;
        for (size_t i = 0; i < ch.data.size() && !bad; i += 4099) {
          if (ch.data[i] != uint8_t((ch.offset + i) % 251)) bad = true;
        }
        got += ch.data.size();
        return Status::Ok();
      },
      DeadlineIn(60s));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(bad);
  EXPECT_EQ(got, kSize);
  EXPECT_EQ(chunks, (kSize + protocol::kMaxChunk - 1) / protocol::kMaxChunk);
  EXPECT_EQ(size, kSize);
  ExpectBelow(rss, 24 * kMiB);
}

TEST(AgentClientLimits, WholeFileReadAboveTheCapIsRefused) {
  for (bool send_size : {true, false}) {  // a lying agent omits the size
    auto [a, b] = SocketPair();
    FakeAgent agent(std::move(b), [send_size](FakeAgent& ag, const Frame& f) {
      ServeFile(ag, f, 3 * kMiB, send_size);
    });
    ClientLimits lim;
    lim.max_read_file_bytes = 1 * kMiB;
    auto c = Connect(std::move(a), lim);
    ASSERT_TRUE(c);
    auto r = c->ReadFile("/big", DeadlineIn(30s));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(r.status().message().find("1 MiB in-memory read limit; use the streamed read"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_TRUE(c->health().ok());
    auto small = c->ReadFileStream("/big", [](const FileChunk&) { return Status::Ok(); });
    EXPECT_TRUE(small.ok()) << small.ToString();
  }
}

// An exec that floods stdout until EXEC_SIGNAL arrives; PING answered.
struct FloodingExec {
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> signal{0};
  uint64_t limit = UINT64_MAX;  // bytes of output, then exit 0

  void Handle(FakeAgent& ag, const Frame& f) {
    if (f.type == MsgType::kPing) {
      ag.Reply(protocol::PongReply{protocol::PingRequest::Decode(f.payload)->nonce}, f.id);
    } else if (f.type == MsgType::kExecSignal) {
      signal = protocol::ExecSignalRequest::Decode(f.payload)->signal;
      stop = true;
      ag.Reply(protocol::EmptyMessageReply<MsgType::kExecSignal>{}, f.id);
    } else if (f.type == MsgType::kExecStart) {
      ag.Reply(protocol::ExecStartReply{7}, f.id, protocol::kFlagMore);
      ag.Spawn([this, &ag, id = f.id] {
        const Bytes out = FakeAgent::Encode(
            protocol::ExecOutputChunk{OutputStream::kStdout, Chunk(protocol::kMaxChunk, 'o')}, id,
            protocol::kFlagMore);
        for (uint64_t sent = 0; !stop && sent < limit; sent += protocol::kMaxChunk) {
          if (!ag.TrySend(out)) return;
        }
        protocol::ExecExitReply exit;
        exit.exit_code = 0;
        ag.TrySend(FakeAgent::Encode(exit, id));
      });
    }
  }
};

TEST(AgentClientLimits, StalledStreamingCallerIsCutOffAndOtherRequestsGoOn) {
  auto [a, b] = SocketPair();
  FloodingExec flood;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) { flood.Handle(ag, f); });
  ClientLimits lim;
  lim.max_queued_bytes_per_request = 256 * 1024;
  lim.stall_timeout = 300ms;
  auto c = Connect(std::move(a), lim);
  ASSERT_TRUE(c);
  PeakRss rss;
  std::promise<void> entered, release;
  auto released = release.get_future().share();
  std::atomic<int> calls{0};
  auto exec = std::async(std::launch::async, [&] {
    ExecIo io;
    io.on_output = [&](OutputStream, ByteSpan) {
      if (calls++ == 0) {
        entered.set_value();
        released.wait_for(20s);  // the HTTP client stopped reading
      }
    };
    protocol::ExecStartRequest req;
    req.argv = {"yes"};
    return c->Exec(req, io, DeadlineIn(30s));
  });
  ASSERT_EQ(entered.get_future().wait_for(10s), std::future_status::ready);
  // Other requests on the connection go on: each reads the flood into the
  // exec's queue until it is full, then waits at most stall_timeout for the
  // cut. Ping until the cut, however slowly this host runs the flooder.
  for (int i = 0; c->requests_cut_off() == 0 && i < 2000; ++i) {
    ASSERT_TRUE(c->Ping(DeadlineIn(5s)).ok()) << i;
  }
  ASSERT_EQ(c->requests_cut_off(), 1u);
  release.set_value();
  auto r = exec.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("cut off"), std::string::npos);
  EXPECT_EQ(calls.load(), 1) << "frames queued before the cut are dropped with it";
  // The process is killed once its output is abandoned.
  EXPECT_EQ(flood.signal.load(), 9u);
  EXPECT_TRUE(c->health().ok());
  ExpectBelow(rss, 16 * kMiB);
}

TEST(AgentClientLimits, SlowStreamingCallerIsPushedBackNotCutOff) {
  auto [a, b] = SocketPair();
  FloodingExec flood;
  flood.limit = 4 * kMiB;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) { flood.Handle(ag, f); });
  ClientLimits lim;
  lim.max_queued_bytes_per_request = 256 * 1024;
  lim.stall_timeout = 2s;
  auto c = Connect(std::move(a), lim);
  ASSERT_TRUE(c);
  std::atomic<bool> done{false};
  std::thread pinger([&] {
    while (!done) EXPECT_TRUE(c->Ping(DeadlineIn(10s)).ok());
  });
  uint64_t got = 0;
  ExecIo io;
  io.on_output = [&](OutputStream, ByteSpan d) {
    got += d.size();
    std::this_thread::sleep_for(3ms);
  };
  protocol::ExecStartRequest req;
  req.argv = {"yes"};
  auto r = c->Exec(req, io, DeadlineIn(30s));
  done = true;
  pinger.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(got, 4 * kMiB);
  EXPECT_EQ(flood.signal.load(), 0u);
  EXPECT_EQ(c->requests_cut_off(), 0u);
}

}  // namespace
}  // namespace kubicle::guest::client
