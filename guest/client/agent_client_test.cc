#include "guest/client/agent_client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <optional>
#include <thread>

#include "guest/client/fake_agent_test_util.h"
#include "guest/protocol/tlv.h"

namespace kubicle::guest::client {
namespace {

using namespace std::chrono_literals;
using protocol::Frame;
using protocol::MsgType;

using test_util::FakeAgent;
using test_util::SocketPair;

void AnswerPings(FakeAgent& a, const Frame& f) {
  if (f.type == MsgType::kPing) {
    a.Reply(protocol::PongReply{protocol::PingRequest::Decode(f.payload)->nonce}, f.id);
  } else if (f.type == MsgType::kEcho) {
    a.Reply(*protocol::EchoMessage::Decode(f.payload), f.id);
  }
}

TEST(AgentClient, HelloThenPingAndEcho) {
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), AnswerPings);
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->agent().name, "fake");
  EXPECT_TRUE((*c)->agent().HasCapability("files"));
  EXPECT_TRUE((*c)->Ping().ok());
  auto e = (*c)->Echo(Bytes{1, 2, 3});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, (Bytes{1, 2, 3}));
}

TEST(AgentClient, AgentErrorsBecomeStatuses) {
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame& f) {
    ag.Reply(protocol::ErrorReply::FromStatus(Status::NotFound("no /x")), f.id);
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  auto st = (*c)->Stat("/x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(st.status().message(), "no /x");
  EXPECT_TRUE((*c)->health().ok());
}

TEST(AgentClient, DeadlineExpiresAndConnectionStaysUsable) {
  auto [a, b] = SocketPair();
  int pings = 0;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) {
    if (++pings > 1) AnswerPings(ag, f);  // ignore the first ping
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  const auto t0 = Clock::now();
  Status s = (*c)->Ping(DeadlineIn(100ms));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  // Not before the deadline; and it came back at all, which a client that
  // ignored its deadline would not: 60 s is no scheduling delay, so a loaded
  // host cannot fail this.
  EXPECT_GE(Clock::now() - t0, 100ms);
  EXPECT_LT(Clock::now() - t0, 60s);
  EXPECT_TRUE((*c)->Ping(DeadlineIn(5s)).ok());
}

TEST(AgentClient, PeerCloseBreaksTheConnection) {
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame&) { ag.Close(); });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  Status s = (*c)->Ping(DeadlineIn(5s));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_FALSE((*c)->health().ok());
  EXPECT_EQ((*c)->Ping(DeadlineIn(5s)).code(), StatusCode::kUnavailable);
}

TEST(AgentClient, CorruptStreamFromAgentBreaksTheConnection) {
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame&) {
    ag.SendRaw(Bytes(protocol::kHeaderSize, 0xee));
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  Status s = (*c)->Ping(DeadlineIn(5s));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("bad magic"), std::string::npos) << s.ToString();
}

TEST(AgentClient, ConcurrentRequestsAreRoutedById) {
  auto [a, b] = SocketPair();
  // Answer in reverse order of arrival, four at a time.
  std::vector<Frame> held;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) {
    held.push_back(f);
    if (held.size() < 4) return;
    for (auto it = held.rbegin(); it != held.rend(); ++it) AnswerPings(ag, *it);
    held.clear();
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        Bytes msg = {uint8_t(t), uint8_t(i)};
        auto e = (*c)->Echo(msg, DeadlineIn(10s));
        if (e.ok() && *e == msg) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 40);
}

// ---- Each request gets its own answer, exactly once ----

TEST(AgentClient, AReplyForAnIdNeverSentReachesNoWaiter) {
  auto [a, b] = SocketPair();
  std::promise<void> echo_held;
  std::optional<Frame> echo;
  int pings = 0;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) {
    if (f.type == MsgType::kEcho && !echo) {
      echo = f;  // answered after the ping
      echo_held.set_value();
      return;
    }
    if (f.type == MsgType::kEcho) return AnswerPings(ag, f);
    if (++pings == 1) {
      // Replies for ids the client never sent: one far off, one the id its
      // next request will take. Neither may reach a waiter, now or later.
      ag.Reply(protocol::EchoMessage{{9, 9}}, 0x7fffffff);
      ag.Reply(protocol::EchoMessage{{9, 9}}, f.id + 1);
    }
    AnswerPings(ag, f);
    if (pings == 1) AnswerPings(ag, *echo);
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  Result<Bytes> echoed = Status::Internal("not run");
  std::thread waiter([&] { echoed = (*c)->Echo(Bytes{1, 2}, DeadlineIn(60s)); });
  echo_held.get_future().wait();
  EXPECT_TRUE((*c)->Ping(DeadlineIn(60s)).ok());
  waiter.join();
  ASSERT_TRUE(echoed.ok()) << echoed.status().ToString();
  EXPECT_EQ(*echoed, (Bytes{1, 2}));
  // The request that takes the id the stray reply named gets its own.
  auto next = (*c)->Echo(Bytes{3}, DeadlineIn(60s));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, Bytes{3});
  EXPECT_TRUE((*c)->health().ok());
}

TEST(AgentClient, ADuplicateReplyNeverReachesALaterRequest) {
  auto [a, b] = SocketPair();
  FakeAgent agent(std::move(b), [](FakeAgent& ag, const Frame& f) {
    if (f.type != MsgType::kEcho) return AnswerPings(ag, f);
    auto m = *protocol::EchoMessage::Decode(f.payload);
    ag.Reply(m, f.id);
    m.data.push_back(0xff);  // the same id answered again, differently
    ag.Reply(m, f.id);
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  for (uint8_t i = 0; i < 20; ++i) {
    auto e = (*c)->Echo(Bytes{i}, DeadlineIn(60s));
    ASSERT_TRUE(e.ok()) << int(i) << ": " << e.status().ToString();
    EXPECT_EQ(*e, Bytes{i});
  }
  EXPECT_TRUE((*c)->Ping(DeadlineIn(60s)).ok());
}

TEST(AgentClient, AReplyAfterItsCallerGaveUpIsNotGivenToTheNextRequest) {
  auto [a, b] = SocketPair();
  std::optional<Frame> first;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) {
    if (!first) {
      first = f;  // held until the next request: its caller gives up first
      return;
    }
    AnswerPings(ag, *first);
    AnswerPings(ag, f);
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Ping(DeadlineIn(100ms)).code(), StatusCode::kDeadlineExceeded);
  // A PONG for the first ping would carry the wrong nonce (DataLoss).
  Status s = (*c)->Ping(DeadlineIn(60s));
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(AgentClient, TheConnectionDroppingWakesEveryWaiterWithAnError) {
  auto [a, b] = SocketPair();
  std::atomic<int> requests{0};
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) {
    if (f.type == MsgType::kExecStart) {
      ag.Reply(protocol::ExecStartReply{7}, f.id, protocol::kFlagMore);  // a stream under way
    }
    if (++requests == 4) ag.Close();  // every request is waiting by now
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  std::vector<Status> results(4);
  std::atomic<int> outputs{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { results[i] = (*c)->Ping(DeadlineIn(60s)); });
  }
  threads.emplace_back([&] {
    protocol::ExecStartRequest req;
    req.argv = {"sleep", "1000"};
    ExecIo io;
    io.on_output = [&](protocol::OutputStream, ByteSpan) { ++outputs; };
    results[3] = (*c)->Exec(req, io, DeadlineIn(60s)).status();
  });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(results[i].code(), StatusCode::kUnavailable) << i << ": " << results[i].ToString();
  }
  EXPECT_EQ(outputs.load(), 0);
  EXPECT_EQ((*c)->health().code(), StatusCode::kUnavailable);
}

TEST(AgentClient, ExecStreamsOutputAndStdin) {
  auto [a, b] = SocketPair();
  Bytes stdin_seen;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) {
    if (f.type == MsgType::kExecStart) {
      ag.Reply(protocol::ExecStartReply{1234}, f.id, protocol::kFlagMore);
      ag.Reply(protocol::ExecOutputChunk{protocol::OutputStream::kStderr, {'w'}}, f.id,
               protocol::kFlagMore);
    } else if (f.type == MsgType::kExecStdin) {
      auto in = protocol::ExecStdinChunk::Decode(f.payload);
      stdin_seen.insert(stdin_seen.end(), in->data.begin(), in->data.end());
      if (f.has_more()) return;
      ag.Reply(protocol::ExecOutputChunk{protocol::OutputStream::kStdout, stdin_seen}, f.id,
               protocol::kFlagMore);
      protocol::ExecExitReply exit;
      exit.exit_code = 3;
      ag.Reply(exit, f.id);
    }
  });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  protocol::ExecStartRequest req;
  req.argv = {"cat"};
  req.stdin_streamed = true;
  int chunks = 0;
  uint32_t pid = 0;
  ExecIo io;
  io.next_stdin = [&]() -> std::optional<Bytes> {
    if (chunks == 2) return std::nullopt;
    return Bytes{uint8_t('a' + chunks++)};
  };
  io.on_started = [&](uint32_t, uint32_t p) { pid = p; };
  auto r = (*c)->Exec(req, io);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(pid, 1234u);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->stdout_data, (Bytes{'a', 'b'}));
  EXPECT_EQ(r->stderr_data, (Bytes{'w'}));
}

TEST(AgentClient, FilesAreChunkedWithinTheAgentLimit) {
  auto [a, b] = SocketPair();
  Bytes stored;
  FakeAgent agent(
      std::move(b),
      [&](FakeAgent& ag, const Frame& f) {
        if (f.type == MsgType::kFileWrite) {
          auto c = protocol::FileWriteChunk::Decode(f.payload);
          ASSERT_TRUE(c.ok());
          ASSERT_EQ(c->offset, stored.size());
          stored.insert(stored.end(), c->data.begin(), c->data.end());
          if (!f.has_more()) ag.Reply(protocol::FileWriteReply{stored.size()}, f.id);
        } else if (f.type == MsgType::kFileRead) {
          for (size_t off = 0; off < stored.size(); off += 3000) {
            protocol::FileReadChunk rc;
            rc.offset = off;
            const size_t n = std::min<size_t>(3000, stored.size() - off);
            rc.data.assign(stored.begin() + off, stored.begin() + off + n);
            ag.Reply(rc, f.id, off + n < stored.size() ? protocol::kFlagMore : 0);
          }
        }
      },
      4096);
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  Bytes data(10000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7);
  ASSERT_TRUE((*c)->WriteFile("/f", data).ok());
  EXPECT_EQ(stored, data);
  for (size_t s : agent.payload_sizes) EXPECT_LE(s, 4096u);
  EXPECT_GE(agent.payload_sizes.size(), 3u);
  auto back = (*c)->ReadFile("/f");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, data);
  // A single request above the agent's limit fails locally.
  auto big = (*c)->Echo(Bytes(5000));
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*c)->health().ok());
}

// A fake agent with one 64-sector disk, answering DISK_* frames the way the
// test guest does; records every request so the framing can be checked.
struct FakeDisk {
  static constexpr uint64_t kSectors = 64;
  Bytes bytes = Bytes(kSectors * protocol::kDiskSectorSize, 0);
  std::vector<protocol::DiskReadRequest> reads;
  std::vector<protocol::DiskWriteRequest> writes;

  void Handle(FakeAgent& ag, const Frame& f) {
    if (f.type == MsgType::kDiskInfo) {
      ag.Reply(protocol::DiskInfoReply{{{kSectors, false, "disk0"}, {8, true, "disk1"}}}, f.id);
    } else if (f.type == MsgType::kDiskRead) {
      auto r = protocol::DiskReadRequest::Decode(f.payload);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      reads.push_back(*r);
      if (r->sector + r->count > kSectors) {
        return ag.Reply(protocol::ErrorReply::FromStatus(Status::OutOfRange("beyond the disk")),
                        f.id);
      }
      const auto at = bytes.begin() + std::ptrdiff_t(r->sector * protocol::kDiskSectorSize);
      ag.Reply(protocol::DiskReadReply{Bytes(at, at + r->count * protocol::kDiskSectorSize)}, f.id);
    } else if (f.type == MsgType::kDiskWrite) {
      auto w = protocol::DiskWriteRequest::Decode(f.payload);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      writes.push_back(*w);
      if (w->disk != 0) {
        return ag.Reply(protocol::ErrorReply::FromStatus(Status::PermissionDenied("read-only")),
                        f.id);
      }
      std::copy(w->data.begin(), w->data.end(),
                bytes.begin() + std::ptrdiff_t(w->sector * protocol::kDiskSectorSize));
      const auto sectors = uint32_t(w->data.size() / protocol::kDiskSectorSize);
      ag.Reply(protocol::DiskWriteReply{sectors}, f.id);
    }
  }
};

TEST(AgentClient, DiskRangesAreSplitWithinBothLimits) {
  auto [a, b] = SocketPair();
  FakeDisk disk;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) { disk.Handle(ag, f); }, 4096);
  ClientOptions opts;
  opts.max_payload = 8192;  // our limit bounds DISK_READ replies
  auto c = AgentClient::Adopt(std::move(a), opts);
  ASSERT_TRUE(c.ok());

  auto info = (*c)->DiskInfo();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_EQ(info->size(), 2u);
  EXPECT_EQ((*info)[0], (protocol::DiskDescription{64, false, "disk0"}));
  EXPECT_TRUE((*info)[1].read_only);

  Bytes data(20 * protocol::kDiskSectorSize);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 13 + 1);
  ASSERT_TRUE((*c)->DiskWrite(0, 3, data, /*flush=*/true).ok());
  ASSERT_GE(disk.writes.size(), 3u);  // 4096-byte agent limit: < 8 sectors a frame
  uint64_t next = 3;
  for (size_t i = 0; i < disk.writes.size(); ++i) {
    EXPECT_EQ(disk.writes[i].sector, next);
    next += disk.writes[i].data.size() / protocol::kDiskSectorSize;
    EXPECT_EQ(disk.writes[i].flush, i + 1 == disk.writes.size()) << "flush only at the end";
  }
  EXPECT_EQ(next, 23u);
  for (size_t s : agent.payload_sizes) EXPECT_LE(s, 4096u);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), disk.bytes.begin() + 3 * 512));

  auto back = (*c)->DiskRead(0, 3, 20);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  ASSERT_GE(disk.reads.size(), 2u);  // 8192-byte client limit: < 16 sectors a frame
  for (const auto& r : disk.reads) EXPECT_LE(r.count * 512 + 64, 8192u);

  // A flush on its own is one frame without data.
  disk.writes.clear();
  ASSERT_TRUE((*c)->DiskWrite(0, 0, {}, /*flush=*/true).ok());
  ASSERT_EQ(disk.writes.size(), 1u);
  EXPECT_TRUE(disk.writes[0].data.empty());
  EXPECT_TRUE(disk.writes[0].flush);
}

TEST(AgentClient, DiskErrorsAndLocalChecks) {
  auto [a, b] = SocketPair();
  FakeDisk disk;
  FakeAgent agent(std::move(b), [&](FakeAgent& ag, const Frame& f) { disk.Handle(ag, f); });
  auto c = AgentClient::Adopt(std::move(a));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->DiskWrite(1, 0, Bytes(512, 1)).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ((*c)->DiskRead(0, 64, 1).status().code(), StatusCode::kOutOfRange);
  // Checked before anything is sent.
  const size_t sent = agent.payload_sizes.size();
  EXPECT_EQ((*c)->DiskRead(0, 0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->DiskWrite(0, 0, Bytes(100, 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->DiskRead(0, ~uint64_t{0}, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*c)->DiskWrite(0, 0, {}).ok());  // nothing to do
  EXPECT_EQ(agent.payload_sizes.size(), sent);
  EXPECT_TRUE((*c)->health().ok());
  EXPECT_TRUE((*c)->DiskInfo().ok());
}

// A Firecracker-style vsock UDS listening at a temp path.
class VsockUds {
 public:
  explicit VsockUds(std::function<void(int fd)> serve) {
    path_ = "/tmp/kubicle-h3-vsock-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter_++);
    ::unlink(path_.c_str());
    listen_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    EXPECT_EQ(0, ::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
    EXPECT_EQ(0, ::listen(listen_.get(), 4));
    thread_ = std::thread([this, serve] {
      UniqueFd conn(::accept(listen_.get(), nullptr, nullptr));
      if (conn) serve(conn.get());
    });
  }
  ~VsockUds() {
    thread_.join();
    ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
  UniqueFd listen_;
  std::thread thread_;
};

std::string ReadLineFrom(int fd) {
  std::string line;
  char ch;
  while (::recv(fd, &ch, 1, 0) == 1 && ch != '\n') line.push_back(ch);
  return line;
}

TEST(AgentClient, ConnectsThroughTheVsockHandshake) {
  std::string got;
  VsockUds uds([&](int fd) {
    got = ReadLineFrom(fd);
    ::send(fd, "OK 1073741824\n", 14, 0);
    FakeAgent agent(UniqueFd(::dup(fd)), AnswerPings);
    // Keep the agent alive until the client hangs up.
    char c;
    ::recv(fd, &c, 1, MSG_PEEK);
    while (::recv(fd, &c, 1, MSG_PEEK) > 0) std::this_thread::sleep_for(5ms);
  });
  {
    auto c = AgentClient::ConnectVsock(uds.path(), 1024);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE((*c)->Ping().ok());
  }
  EXPECT_EQ(got, "CONNECT 1024");
}

TEST(AgentClient, VsockHandshakeFailuresAreClear) {
  {
    VsockUds uds([](int fd) {
      ReadLineFrom(fd);
      ::send(fd, "NOPE\n", 5, 0);
    });
    auto c = ConnectVsockUds(uds.path(), 1024, DeadlineIn(5s));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(c.status().message().find("NOPE"), std::string::npos);
  }
  {
    VsockUds uds([](int fd) { ReadLineFrom(fd); });  // closes without answering
    auto c = ConnectVsockUds(uds.path(), 1024, DeadlineIn(5s));
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().ToString();
  }
  {
    VsockUds uds([](int fd) {  // never answers: holds on until the client hangs up
      ReadLineFrom(fd);
      char ch;
      while (::recv(fd, &ch, 1, 0) > 0) {
      }
    });
    auto c = ConnectVsockUds(uds.path(), 1024, DeadlineIn(50ms));
    EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
  }
  auto missing = ConnectVsockUds("/tmp/kubicle-h3-does-not-exist", 1024, DeadlineIn(1s));
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable) << missing.status().ToString();
}

}  // namespace
}  // namespace kubicle::guest::client
