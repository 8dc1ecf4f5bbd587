// kubicle-agent against malformed, hostile and oversized input: every bad
// frame gets an ERROR and the connection stays usable; only lost framing
// closes a connection, and never the agent.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "guest/agent/agent_test_env.h"
#include "guest/client/socket_util.h"
#include "guest/protocol/tlv.h"

namespace kubicle::guest::agent::testing {
namespace {

using namespace std::chrono_literals;
using client::DeadlineIn;
using protocol::Bytes;
using protocol::ErrorCode;
using protocol::Frame;
using protocol::MsgType;
using protocol::Tag;
using protocol::TlvBuilder;

Bytes RawFrame(MsgType type, uint32_t id, Bytes payload, uint32_t flags = 0,
               uint16_t version = protocol::kVersion1) {
  Frame f;
  f.type = type;
  f.id = id;
  f.flags = flags;
  f.version = version;
  f.payload = std::move(payload);
  return *protocol::EncodeFrame(f);
}

class AgentProtocolTest : public AgentTest {
 protected:
  // Sends one raw frame and expects an ERROR with `code` for its id.
  void ExpectError(const Bytes& raw, uint32_t id, ErrorCode code, const std::string& what) {
    auto f = client_->RawExchange(id, raw, DeadlineIn(5s));
    ASSERT_TRUE(f.ok()) << what << ": " << f.status().ToString();
    ASSERT_EQ(f->type, MsgType::kError) << what;
    EXPECT_TRUE(f->is_reply()) << what;
    auto e = protocol::ErrorReply::Decode(f->payload);
    ASSERT_TRUE(e.ok()) << what;
    EXPECT_EQ(e->code, code) << what << ": " << e->message;
    EXPECT_TRUE(client_->Ping().ok()) << what << ": connection unusable afterwards";
  }
  uint32_t next_id_ = 1000;
};

TEST_F(AgentProtocolTest, MalformedPayloadsGetInvalidArgument) {
  struct Case {
    std::string what;
    MsgType type;
    Bytes payload;
  };
  Bytes truncated_tlv = TlvBuilder().Str(Tag::kPath, "/tmp").Take();
  truncated_tlv.resize(truncated_tlv.size() - 2);
  Bytes overrun = TlvBuilder().U64(Tag::kNonce, 1).Take();
  protocol::StoreLe32(overrun.data() + 2, 0xfffffff0u);  // length far past the end
  std::vector<Case> cases = {
      {"truncated TLV", MsgType::kStat, truncated_tlv},
      {"TLV length overrun", MsgType::kPing, overrun},
      {"half a TLV header", MsgType::kPing, Bytes{1, 0, 0}},
      {"wrong fixed width", MsgType::kPing, TlvBuilder().U32(Tag::kNonce, 1).Take()},
      {"duplicate field", MsgType::kStat,
       TlvBuilder().Str(Tag::kPath, "/a").Str(Tag::kPath, "/b").Take()},
      {"missing path", MsgType::kStat, {}},
      {"relative path", MsgType::kList, TlvBuilder().Str(Tag::kPath, "etc").Take()},
      {"path with NUL", MsgType::kStat, TlvBuilder().Str(Tag::kPath, std::string("/a\0b", 4)).Take()},
      {"path too long", MsgType::kStat, TlvBuilder().Str(Tag::kPath, "/" + std::string(5000, 'a')).Take()},
      {"bool not 0/1", MsgType::kRemove,
       TlvBuilder().Str(Tag::kPath, "/x").U8(Tag::kRecursive, 7).Take()},
      {"exec without command", MsgType::kExecStart, {}},
      {"exec with argv and shell", MsgType::kExecStart,
       TlvBuilder().Str(Tag::kArgv, "true").Str(Tag::kShellCommand, "true").Take()},
      {"exec env without =", MsgType::kExecStart,
       TlvBuilder().Str(Tag::kArgv, "true").Str(Tag::kEnv, "NOEQUALS").Take()},
      {"exec relative cwd", MsgType::kExecStart,
       TlvBuilder().Str(Tag::kArgv, "true").Str(Tag::kCwd, "tmp").Take()},
      {"exec inline and streamed stdin", MsgType::kExecStart,
       TlvBuilder().Str(Tag::kArgv, "cat").Bytes(Tag::kStdin, Bytes{1}).Bool(Tag::kStdinStreamed, true).Take()},
      {"signal 0", MsgType::kExecSignal,
       TlvBuilder().U32(Tag::kExecId, 1).U32(Tag::kSignal, 0).Take()},
      {"mode above 07777", MsgType::kChmod,
       TlvBuilder().Str(Tag::kPath, "/x").U32(Tag::kMode, 0170000).Take()},
      {"write without offset", MsgType::kFileWrite, TlvBuilder().Str(Tag::kPath, "/tmp/x").Take()},
      {"hello without versions", MsgType::kHello, {}},
      {"hello with a tiny max_payload", MsgType::kHello,
       TlvBuilder().U16(Tag::kMinVersion, 1).U16(Tag::kMaxVersion, 1).U32(Tag::kMaxPayload, 16).Take()},
      {"hostname with a space", MsgType::kPostRestore,
       TlvBuilder().U64(Tag::kGeneration, 1).Str(Tag::kHostname, "a b").Take()},
      {"entropy read of 0", MsgType::kEntropyRead, TlvBuilder().U64(Tag::kLength, 0).Take()},
      {"mem fill not a multiple of 8", MsgType::kMemFill,
       TlvBuilder().U64(Tag::kSeed, 1).U64(Tag::kSize, 7).Take()},
  };
  for (const Case& c : cases) {
    const uint32_t id = next_id_++;
    ExpectError(RawFrame(c.type, id, c.payload), id, ErrorCode::kInvalidArgument, c.what);
  }
}

TEST_F(AgentProtocolTest, TooManyArgvEntriesAreRefused) {
  TlvBuilder b;
  for (uint32_t i = 0; i <= protocol::kMaxArgs; ++i) b.Str(Tag::kArgv, "x");
  ExpectError(RawFrame(MsgType::kExecStart, 7, b.Take()), 7, ErrorCode::kInvalidArgument, "argv");
}

TEST_F(AgentProtocolTest, BadHeadersGetPreciseErrors) {
  const Bytes ping = TlvBuilder().U64(Tag::kNonce, 5).Take();
  ExpectError(RawFrame(MsgType(0x7777), 11, {}), 11, ErrorCode::kUnimplemented, "unknown type");
  ExpectError(RawFrame(MsgType::kPing, 12, ping, protocol::kFlagReply), 12,
              ErrorCode::kInvalidArgument, "reply flag");
  ExpectError(RawFrame(MsgType::kPing, 13, ping, 1u << 7), 13, ErrorCode::kInvalidArgument,
              "unknown flag");
  ExpectError(RawFrame(MsgType::kPing, 14, ping, protocol::kFlagMore), 14,
              ErrorCode::kInvalidArgument, "MORE on PING");
  ExpectError(RawFrame(MsgType::kPing, 15, ping, 0, 2), 15, ErrorCode::kFailedPrecondition,
              "version 2");
  ExpectError(RawFrame(MsgType::kHello, 16, protocol::HelloRequest{}.Encode(), 0, 3), 16,
              ErrorCode::kFailedPrecondition, "HELLO not in version 1");
  ExpectError(RawFrame(MsgType::kExecExit, 17, {}), 17, ErrorCode::kInvalidArgument,
              "agent-to-host type");
  protocol::HelloRequest future;
  future.min_version = 5;
  future.max_version = 9;
  ExpectError(RawFrame(MsgType::kHello, 18, future.Encode()), 18, ErrorCode::kFailedPrecondition,
              "no common version");
}

TEST_F(AgentProtocolTest, ReplyLargerThanTheClientLimitBecomesAnError) {
  client::ClientOptions small;
  small.max_payload = protocol::kMinPayloadLimit;
  auto c = agent_->Connect(small);
  ASSERT_TRUE(c.ok());
  const Bytes data(10000, 7);
  auto r = (*c)->Echo(data);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  // Streams respect the limit by chunking instead.
  const Bytes blob = RandomBytes(50000, 1);
  ASSERT_TRUE((*c)->WriteFile(Path("small"), blob).ok());
  auto back = (*c)->ReadFile(Path("small"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, blob);
  auto out = (*c)->Exec([] {
    protocol::ExecStartRequest req;
    req.shell_command = "head -c 20000 /dev/zero";
    return req;
  }());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->stdout_data.size(), 20000u);
  EXPECT_TRUE((*c)->Ping().ok());
}

TEST_F(AgentProtocolTest, RandomPayloadsNeverBreakTheConnection) {
  std::mt19937 rng(1234);
  const MsgType types[] = {MsgType::kHello,     MsgType::kPing,       MsgType::kEcho,
                           MsgType::kExecStart, MsgType::kExecSignal, MsgType::kFileRead,
                           MsgType::kStat,      MsgType::kList,       MsgType::kMkdir,
                           MsgType::kRemove,    MsgType::kChmod,      MsgType::kIdentity,
                           MsgType::kPostRestore, MsgType::kMemChecksum, MsgType::kEntropyRead,
                           MsgType::kFileWrite};
  for (int i = 0; i < 400; ++i) {
    const MsgType t = types[rng() % std::size(types)];
    Bytes payload(rng() % 64);
    for (auto& b : payload) b = uint8_t(rng());
    const uint32_t id = next_id_++;
    auto f = client_->RawExchange(id, RawFrame(t, id, payload), DeadlineIn(5s));
    ASSERT_TRUE(f.ok()) << protocol::MsgTypeName(t) << ": " << f.status().ToString();
  }
  EXPECT_TRUE(client_->Ping().ok());
}

// The following cases need a raw socket: they break framing or use id 0,
// which AgentClient rightly treats as fatal for its connection.
class RawConnection {
 public:
  explicit RawConnection(const std::string& path) {
    auto fd = client::ConnectUnixSocket(path, DeadlineIn(5s));
    EXPECT_TRUE(fd.ok());
    if (fd.ok()) fd_ = std::move(*fd);
  }
  void Send(const Bytes& b) {
    ASSERT_TRUE(client::SendAll(fd_.get(), b, DeadlineIn(5s)).ok());
  }
  // Next frame, or nullopt at EOF / timeout.
  std::optional<Frame> Next() {
    for (;;) {
      auto f = dec_.Next();
      if (f.ok() && f->has_value()) return std::move(**f);
      if (!f.ok()) return std::nullopt;
      if (!client::WaitFd(fd_.get(), POLLIN, DeadlineIn(5s)).ok()) return std::nullopt;
      uint8_t buf[4096];
      const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n <= 0) return std::nullopt;
      dec_.Append(protocol::ByteSpan(buf, size_t(n)));
    }
  }
  bool AtEof() {
    if (!client::WaitFd(fd_.get(), POLLIN, DeadlineIn(5s)).ok()) return false;
    uint8_t b;
    return ::recv(fd_.get(), &b, 1, 0) == 0;
  }

 private:
  UniqueFd fd_;
  protocol::FrameDecoder dec_;
};

TEST_F(AgentProtocolTest, RequestIdZeroIsRefusedButHarmless) {
  RawConnection raw(agent_->socket_path());
  const Bytes ping = TlvBuilder().U64(Tag::kNonce, 9).Take();
  raw.Send(RawFrame(MsgType::kPing, 0, ping));
  auto err = raw.Next();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->type, MsgType::kError);
  EXPECT_EQ(err->id, 0u);
  raw.Send(RawFrame(MsgType::kPing, 3, ping));
  auto pong = raw.Next();
  ASSERT_TRUE(pong.has_value());
  EXPECT_EQ(pong->type, MsgType::kPong);
  EXPECT_EQ(pong->id, 3u);
}

TEST_F(AgentProtocolTest, PipelinedAndSplitFramesAreAllAnswered) {
  RawConnection raw(agent_->socket_path());
  Bytes all;
  for (uint32_t id = 1; id <= 50; ++id) {
    const Bytes f = RawFrame(MsgType::kPing, id, TlvBuilder().U64(Tag::kNonce, id).Take());
    all.insert(all.end(), f.begin(), f.end());
  }
  // Byte by byte for the first frames, the rest at once.
  for (size_t i = 0; i < 100; ++i) raw.Send(Bytes{all[i]});
  raw.Send(Bytes(all.begin() + 100, all.end()));
  for (uint32_t id = 1; id <= 50; ++id) {
    auto f = raw.Next();
    ASSERT_TRUE(f.has_value()) << id;
    EXPECT_EQ(f->id, id);
    auto pong = protocol::PongReply::Decode(f->payload);
    ASSERT_TRUE(pong.ok());
    EXPECT_EQ(pong->nonce, id);
  }
}

TEST_F(AgentProtocolTest, LostFramingClosesOnlyThatConnection) {
  for (int variant = 0; variant < 2; ++variant) {
    RawConnection raw(agent_->socket_path());
    Bytes bad = RawFrame(MsgType::kPing, 1, {});
    if (variant == 0) {
      bad[0] = 'X';  // bad magic
    } else {
      protocol::StoreLe32(bad.data() + 16, protocol::kMaxPayload + 1);  // oversized
    }
    raw.Send(bad);
    auto err = raw.Next();
    ASSERT_TRUE(err.has_value()) << variant;
    EXPECT_EQ(err->type, MsgType::kError);
    EXPECT_EQ(err->id, 0u);
    EXPECT_TRUE(raw.AtEof()) << variant;
  }
  EXPECT_TRUE(client_->Ping().ok());
  EXPECT_TRUE(agent_->alive());
}

TEST_F(AgentProtocolTest, MaximumSizeFramesWork) {
  // An ECHO whose payload is exactly the 1 MiB limit.
  const size_t data_len = protocol::kMaxPayload - protocol::kTlvHeaderSize;
  auto r = client_->Echo(Bytes(data_len, 0x5a), DeadlineIn(20s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), data_len);
}

TEST_F(AgentProtocolTest, ManyConnectionsComeAndGo) {
  for (int round = 0; round < 3; ++round) {
    std::vector<std::unique_ptr<client::AgentClient>> cs;
    for (int i = 0; i < 20; ++i) {
      auto c = agent_->Connect();
      ASSERT_TRUE(c.ok());
      cs.push_back(std::move(*c));
    }
    for (auto& c : cs) EXPECT_TRUE(c->Ping().ok());
  }
  EXPECT_TRUE(client_->Ping().ok());
}


// ---- Each id is answered exactly once: an ERROR ends its id ----

// Sends PING `ping_id` and returns every frame that arrived before its PONG.
// The agent answers in one thread and sends in order, so everything it
// decided to send before reading the PING is in the result.
std::vector<Frame> FramesUntilPong(RawConnection& raw, uint32_t ping_id) {
  raw.Send(RawFrame(MsgType::kPing, ping_id, TlvBuilder().U64(Tag::kNonce, ping_id).Take()));
  std::vector<Frame> got;
  for (;;) {
    auto f = raw.Next();
    if (!f.has_value()) {
      ADD_FAILURE() << "no PONG for " << ping_id;
      return got;
    }
    if (f->id == ping_id && f->type == MsgType::kPong) return got;
    got.push_back(std::move(*f));
  }
}

std::vector<MsgType> TypesFor(const std::vector<Frame>& frames, uint32_t id) {
  std::vector<MsgType> out;
  for (const Frame& f : frames) {
    if (f.id == id) out.push_back(f.type);
  }
  return out;
}

Bytes WriteChunk(uint32_t id, std::optional<std::string> path, uint64_t offset, size_t n,
                 uint32_t flags) {
  protocol::FileWriteChunk c;
  c.path = std::move(path);
  c.atomic = true;
  c.offset = offset;
  c.data.assign(n, 0x5c);
  return RawFrame(MsgType::kFileWrite, id, c.Encode(), flags);
}

Bytes Concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST_F(AgentProtocolTest, AWriteFrameRefusedForItsHeaderFailsItsStreamOnce) {
  RawConnection raw(agent_->socket_path());
  // The middle frame carries an unknown flag; the last one continues where
  // the first ended, so a stream that went on past the refusal would commit
  // a file without the refused bytes and answer a second time.
  raw.Send(Concat({WriteChunk(21, Path("w"), 0, 10, protocol::kFlagMore),
                   WriteChunk(21, std::nullopt, 10, 10, protocol::kFlagMore | (1u << 7)),
                   WriteChunk(21, std::nullopt, 10, 10, 0)}));
  const std::vector<Frame> got = FramesUntilPong(raw, 99);
  ASSERT_EQ(TypesFor(got, 21), std::vector<MsgType>{MsgType::kError});
  EXPECT_EQ(protocol::ErrorReply::Decode(got[0].payload)->code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(Path("w")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(agent_->dir()),
                          std::filesystem::directory_iterator()),
            1)
      << "only agent.sock: the temporary file is removed";
}

TEST_F(AgentProtocolTest, AFirstChunkOnTheIdOfAFailedWriteStartsANewStream) {
  RawConnection raw(agent_->socket_path());
  // The host stops sending at the ERROR (its last frame had MORE) ...
  raw.Send(WriteChunk(22, Path("no/such/dir/f"), 0, 4, protocol::kFlagMore));
  auto err = raw.Next();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->type, MsgType::kError);
  // ... and may then use the id again: that stream is answered.
  raw.Send(WriteChunk(22, Path("f"), 0, 4, 0));
  auto reply = raw.Next();
  ASSERT_TRUE(reply.has_value()) << "the new stream was never answered";
  ASSERT_EQ(reply->type, MsgType::kFileWrite);
  EXPECT_EQ(reply->id, 22u);
  EXPECT_EQ(protocol::FileWriteReply::Decode(reply->payload)->size, 4u);
}

// Starts `cat` with streamed stdin as exec `id` on `raw`; returns its pid.
pid_t StartCat(RawConnection& raw, uint32_t id) {
  protocol::ExecStartRequest req;
  req.argv = {"cat"};
  req.stdin_streamed = true;
  raw.Send(RawFrame(MsgType::kExecStart, id, req.Encode()));
  auto started = raw.Next();
  EXPECT_TRUE(started.has_value());
  if (!started.has_value()) return -1;
  EXPECT_EQ(started->type, MsgType::kExecStart);
  EXPECT_TRUE(started->has_more());
  auto r = protocol::ExecStartReply::Decode(started->payload);
  EXPECT_TRUE(r.ok());
  return r.ok() ? pid_t(r->pid) : -1;
}

Bytes Stdin(uint32_t id, const std::string& data, uint32_t flags) {
  protocol::ExecStdinChunk c;
  c.data.assign(data.begin(), data.end());
  return RawFrame(MsgType::kExecStdin, id, c.Encode(), flags);
}
Bytes StdinPayload(const std::string& data) {
  protocol::ExecStdinChunk c;
  c.data.assign(data.begin(), data.end());
  return c.Encode();
}

TEST_F(AgentProtocolTest, ARefusedStdinFrameEndsItsExecWithOneError) {
  // A payload that does not decode, and a header the agent refuses.
  const Bytes bad[] = {RawFrame(MsgType::kExecStdin, 31, Bytes{1, 0, 0}, protocol::kFlagMore),
                       RawFrame(MsgType::kExecStdin, 32, StdinPayload("x"),
                                protocol::kFlagMore | protocol::kFlagReply)};
  for (uint32_t id : {31u, 32u}) {
    RawConnection raw(agent_->socket_path());
    const pid_t pid = StartCat(raw, id);
    ASSERT_GT(pid, 0);
    // Then the end of stdin: an exec still running would now exit 0.
    raw.Send(Concat({bad[id - 31], Stdin(id, "late", 0)}));
    auto err = raw.Next();
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->id, id);
    EXPECT_EQ(err->type, MsgType::kError);
    ASSERT_TRUE(ProcessGone(pid)) << "the exec is killed with its answer";
    EXPECT_EQ(TypesFor(FramesUntilPong(raw, 99), id), std::vector<MsgType>{})
        << "nothing follows the ERROR for exec " << id;
  }
}

TEST_F(AgentProtocolTest, AnExecStartReusingARunningIdEndsThatExecWithOneError) {
  RawConnection raw(agent_->socket_path());
  const pid_t pid = StartCat(raw, 41);
  ASSERT_GT(pid, 0);
  protocol::ExecStartRequest again;
  again.argv = {"true"};
  raw.Send(Concat({RawFrame(MsgType::kExecStart, 41, again.Encode()), Stdin(41, "", 0)}));
  auto err = raw.Next();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->id, 41u);
  ASSERT_EQ(err->type, MsgType::kError);
  EXPECT_EQ(protocol::ErrorReply::Decode(err->payload)->code, ErrorCode::kAlreadyExists);
  ASSERT_TRUE(ProcessGone(pid));
  EXPECT_EQ(TypesFor(FramesUntilPong(raw, 99), 41), std::vector<MsgType>{});
}

TEST_F(AgentProtocolTest, NothingFollowsAConnectionLevelError) {
  WriteLocalFile(Path("big"), std::string(8 << 20, 'b'));
  RawConnection raw(agent_->socket_path());
  raw.Send(RawFrame(MsgType::kFileRead, 5, protocol::FileReadRequest{Path("big")}.Encode()));
  auto first = raw.Next();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->type, MsgType::kFileRead);
  ASSERT_TRUE(first->has_more()) << "the read is still streaming";
  // The framing is lost while the agent still has most of the file to send.
  raw.Send(Bytes(protocol::kHeaderSize, 'X'));
  std::vector<Frame> all;
  while (auto f = raw.Next()) all.push_back(std::move(*f));
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().type, MsgType::kError);
  EXPECT_EQ(all.back().id, 0u) << "the connection-level ERROR is the last frame sent";
  size_t errors = 0;
  for (const Frame& f : all) errors += f.id == 0;
  EXPECT_EQ(errors, 1u);
}

}  // namespace
}  // namespace kubicle::guest::agent::testing
