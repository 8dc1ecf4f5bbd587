// The test guest's request handler compiled for the host and driven by the
// real AgentClient over a socketpair.
#include "guest/testguest/agent.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <thread>
#include <vector>

#include "guest/client/agent_client.h"
#include "guest/protocol/tlv.h"
#include "guest/testguest/agent_test_harness.h"

namespace kubicle::guest::testguest {
namespace {

using client::AgentClient;
using protocol::Bytes;
using protocol::Frame;
using protocol::MsgType;
using namespace std::chrono_literals;

TEST(TestGuestAgent, HelloPingEcho) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->agent().name, "kubicle-testguest");
  EXPECT_TRUE(c->agent().HasCapability("testguest"));
  EXPECT_TRUE(c->agent().HasCapability("exec"));
  EXPECT_EQ(c->agent().max_payload, Session::kMaxRxPayload);
  EXPECT_TRUE(c->Ping().ok());
  for (size_t n : {size_t(0), size_t(1), size_t(60000)}) {
    auto e = c->Echo(Pattern(n, 1));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(*e, Pattern(n, 1));
  }
}

TEST(TestGuestAgent, FilesWriteReadStatListRemove) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->WriteFile("/a", Pattern(100, 2)).ok());
  ASSERT_TRUE(c->WriteFile("/dir/b", Pattern(64 * 1024, 3), {0600, true}).ok());
  ASSERT_TRUE(c->WriteFile("/dir/sub/c", Bytes{}).ok());
  auto a = c->ReadFile("/a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, Pattern(100, 2));
  auto b = c->ReadFile("/dir/b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, Pattern(64 * 1024, 3));
  auto empty = c->ReadFile("/dir/sub/c");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  Bytes part;
  ASSERT_TRUE(c->ReadFileChunks("/a", 10, 5,
                                [&](uint64_t, protocol::ByteSpan d) {
                                  part.insert(part.end(), d.begin(), d.end());
                                  return Status::Ok();
                                })
                  .ok());
  const Bytes whole = Pattern(100, 2);
  EXPECT_EQ(part, Bytes(whole.begin() + 10, whole.begin() + 15));

  auto st = c->Stat("/dir/b");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, protocol::FileType::kFile);
  EXPECT_EQ(st->size, 64u * 1024);
  EXPECT_EQ(st->mode, 0600u);
  auto sd = c->Stat("/dir");
  ASSERT_TRUE(sd.ok());
  EXPECT_EQ(sd->type, protocol::FileType::kDirectory);
  EXPECT_EQ(c->Stat("/nope").status().code(), StatusCode::kNotFound);

  auto root = c->List("/");
  ASSERT_TRUE(root.ok());
  ASSERT_EQ(root->size(), 2u);
  EXPECT_EQ((*root)[0].name, "a");
  EXPECT_EQ((*root)[0].size, 100u);
  EXPECT_EQ((*root)[1].name, "dir");
  EXPECT_EQ((*root)[1].type, protocol::FileType::kDirectory);
  auto dir = c->List("/dir");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->size(), 2u);  // b and sub
  EXPECT_EQ(c->List("/a").status().code(), StatusCode::kFailedPrecondition);

  ASSERT_TRUE(c->Chmod("/a", 0400).ok());
  EXPECT_EQ(c->Stat("/a")->mode, 0400u);
  ASSERT_TRUE(c->Remove("/a").ok());
  EXPECT_EQ(c->ReadFile("/a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->Remove("/dir").code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c->Remove("/dir", true).ok());
  EXPECT_TRUE(c->List("/")->empty());
}

TEST(TestGuestAgent, FileLimitsAndBadPathsKeepTheConnection) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->WriteFile("/big", Pattern(64 * 1024 + 1, 1)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c->Stat("/big").status().code(), StatusCode::kNotFound);  // nothing half-written
  EXPECT_EQ(c->WriteFile("/a/../b", Bytes{1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->WriteFile("/" + std::string(200, 'x'), Bytes{1}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Stat("relative").status().code(), StatusCode::kInvalidArgument);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(c->WriteFile("/f" + std::to_string(i), Bytes{uint8_t(i)}).ok()) << i;
  }
  EXPECT_EQ(c->WriteFile("/f16", Bytes{1}).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c->WriteFile("/f3", Bytes{9, 9}).ok());  // replacing works when full
  EXPECT_EQ(*c->ReadFile("/f3"), (Bytes{9, 9}));
  EXPECT_EQ(c->WriteFile("/f3/x", Bytes{1}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->Mkdir("/d").code(), StatusCode::kUnimplemented);
  protocol::ExecStartRequest ex;
  ex.shell_command = "true";
  EXPECT_EQ(c->Exec(ex).status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(c->Ping().ok());
}

TEST(TestGuestAgent, MemFillAndChecksumAreDeterministic) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  auto none = c->MemChecksum();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size, 0u);
  ASSERT_TRUE(c->MemFill(5, 1 << 20).ok());
  auto one = c->MemChecksum();
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size, 1u << 20);
  EXPECT_EQ(one->seed, 5u);
  EXPECT_EQ(one->checksum, protocol::ExpectedMemChecksum(5, 1 << 20));
  EXPECT_EQ(c->MemChecksum()->checksum, one->checksum);
  ASSERT_TRUE(c->MemFill(6, 4096).ok());
  EXPECT_EQ(c->MemChecksum()->checksum, protocol::ExpectedMemChecksum(6, 4096));
  EXPECT_NE(protocol::ExpectedMemChecksum(6, 4096), protocol::ExpectedMemChecksum(5, 4096));
  EXPECT_EQ(c->MemFill(1, (1 << 20) + 8).code(), StatusCode::kOutOfRange);
}

TEST(TestGuestAgent, IdentityAndPostRestore) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  auto id = c->Identity();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->hostname, "kubicle-testguest");
  EXPECT_EQ(id->cid, 42u);
  EXPECT_EQ(id->generation, 0u);
  EXPECT_EQ(id->cpus, 3u);
  EXPECT_EQ(id->memory_bytes, 256ull << 20);
  Bytes boot(16);
  for (int i = 0; i < 16; ++i) boot[i] = uint8_t(0x40 + i);
  EXPECT_EQ(id->boot_id, boot);
  EXPECT_EQ(id->wall_clock_ns, 0u);

  protocol::PostRestoreRequest pr;
  pr.entropy_seed = Pattern(32, 9);
  pr.hostname = "clone-7";
  pr.generation = 7;
  pr.wall_clock_ns = 1'700'000'000'000'000'000ull;
  auto gen = c->PostRestore(pr);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(*gen, 7u);
  auto after = c->Identity();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->hostname, "clone-7");
  EXPECT_EQ(after->generation, 7u);
  EXPECT_EQ(after->wall_clock_ns, pr.wall_clock_ns);
  EXPECT_EQ(after->boot_id, boot);
  EXPECT_NE(after->entropy_digest, id->entropy_digest);
}

TEST(TestGuestAgent, ClonesWithDifferentSeedsDiverge) {
  // Two "clones" from the same boot state: same boot entropy.
  Harness h1, h2;
  auto c1 = h1.Connect();
  auto c2 = h2.Connect();
  ASSERT_TRUE(c1 && c2);
  EXPECT_EQ(c1->Identity()->entropy_digest, c2->Identity()->entropy_digest);
  protocol::PostRestoreRequest pr;
  pr.generation = 1;
  pr.entropy_seed = Bytes{1, 2, 3};
  ASSERT_TRUE(c1->PostRestore(pr).ok());
  pr.entropy_seed = Bytes{1, 2, 4};
  ASSERT_TRUE(c2->PostRestore(pr).ok());
  EXPECT_NE(c1->Identity()->entropy_digest, c2->Identity()->entropy_digest);
}

TEST(TestGuestAgent, EntropyRead) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  auto e = c->ReadEntropy(4);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, (Bytes{0x50, 0x51, 0x52, 0x53}));  // after the 16 boot-id bytes
  EXPECT_EQ(c->ReadEntropy(4097).status().code(), StatusCode::kOutOfRange);
  h.platform_.rng_ok = false;
  EXPECT_EQ(c->ReadEntropy(4).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(c->Ping().ok());
}

// Sends a hand-made frame and returns the agent's first answer for `id`.
Result<Frame> Raw(AgentClient& c, uint32_t id, MsgType type, Bytes payload, uint16_t version = 1,
                  uint32_t flags = 0) {
  Frame f;
  f.type = type;
  f.id = id;
  f.version = version;
  f.flags = flags;
  f.payload = std::move(payload);
  return c.RawExchange(id, *protocol::EncodeFrame(f));
}

Status ErrorOf(const Result<Frame>& r) {
  if (!r.ok()) return r.status();
  if (r->type != MsgType::kError) return Status::Ok();
  return protocol::ErrorReply::Decode(r->payload)->ToStatus();
}

TEST(TestGuestAgent, MalformedFramesGetErrorsAndTheConnectionSurvives) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  const Bytes overrun = {0x21, 0x00, 0xff, 0xff, 0xff, 0x7f, 1, 2};
  EXPECT_EQ(ErrorOf(Raw(*c, 900, MsgType::kPing, overrun)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorOf(Raw(*c, 901, MsgType(0x7777), {})).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ErrorOf(Raw(*c, 902, MsgType::kPing, {}, 2)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorOf(Raw(*c, 903, MsgType::kPing, {}, 1, protocol::kFlagReply)).code(),
            StatusCode::kInvalidArgument);
  auto dup = protocol::TlvBuilder().Str(protocol::Tag::kPath, "/a").Str(protocol::Tag::kPath, "/b").Take();
  EXPECT_EQ(ErrorOf(Raw(*c, 904, MsgType::kStat, dup)).code(), StatusCode::kInvalidArgument);
  auto wide = protocol::TlvBuilder().U32(protocol::Tag::kSeed, 1).U64(protocol::Tag::kSize, 8).Take();
  EXPECT_EQ(ErrorOf(Raw(*c, 905, MsgType::kMemFill, wide)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorOf(Raw(*c, 906, MsgType::kEcho, {})).code(), StatusCode::kInvalidArgument);
  // Above the agent's limit but within 1 MiB: skipped, connection kept.
  Frame big;
  big.type = MsgType::kEcho;
  big.id = 907;
  big.payload = protocol::TlvBuilder().Bytes(protocol::Tag::kData, Bytes(Session::kMaxRxPayload)).Take();
  EXPECT_EQ(ErrorOf(c->RawExchange(907, *protocol::EncodeFrame(big))).code(),
            StatusCode::kResourceExhausted);
  // A write stream with a bad offset: one ERROR, the rest of the stream ignored.
  protocol::FileWriteChunk first;
  first.path = "/w";
  first.data = {1};
  protocol::FileWriteChunk bad;
  bad.offset = 5;
  bad.data = {2};
  protocol::FileWriteChunk last;
  last.offset = 6;
  Bytes stream;
  for (const Frame& f : {protocol::MakeFrame(first, 908, protocol::kFlagMore),
                         protocol::MakeFrame(bad, 908, protocol::kFlagMore),
                         protocol::MakeFrame(last, 908)}) {
    Bytes b = *protocol::EncodeFrame(f);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  Status ws = ErrorOf(c->RawExchange(908, stream));
  EXPECT_EQ(ws.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ws.message().find("offset"), std::string::npos) << ws.ToString();
  EXPECT_EQ(c->Stat("/w").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_EQ(c->health().code(), StatusCode::kOk);
}

TEST(TestGuestAgent, BadMagicClosesWithAConnectionError) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  Bytes junk(protocol::kHeaderSize, 0x55);
  auto r = c->RawExchange(77, junk, client::DeadlineIn(5s));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("bad frame magic"), std::string::npos) << r.status().ToString();
}

// ---- Each id is answered exactly once: an ERROR ends its id ----

// One Session + Agent driven directly, as the vsock layer drives them: the
// bytes go in within RxFree(), and every frame the guest writes comes back.
class DirectGuest {
 public:
  DirectGuest() : rx_(Session::kRxCap), tx_(Session::kTxCap), files_(RamFs::kDataBytes) {
    fill_.resize(1 << 16);
    AgentConfig cfg;
    cfg.cid = 3;
    cfg.memory_bytes = 64ull << 20;
    cfg.fill_area = fill_.data();
    cfg.fill_area_size = fill_.size();
    cfg.file_data = files_.data();
    agent_->Init(&platform_, cfg);
    session_->Attach(rx_.data(), tx_.data());
    session_->Reset(agent_.get());
  }
  // Every frame the guest sends while it takes `bytes`.
  std::vector<Frame> Send(const Bytes& bytes) {
    std::vector<Frame> out;
    size_t off = 0;
    for (;;) {
      if (off < bytes.size()) {
        const uint32_t n = uint32_t(std::min<size_t>(session_->RxFree(), bytes.size() - off));
        session_->Receive(bytes.data() + off, n);
        off += n;
      }
      const uint32_t consumed = session_->Process(agent_.get());
      const uint32_t sent = session_->TxSize();
      decoder_.Append(protocol::ByteSpan(session_->TxData(), sent));
      session_->TxConsume(sent);
      for (;;) {
        auto f = decoder_.Next();
        EXPECT_TRUE(f.ok()) << f.status().ToString();
        if (!f.ok() || !f->has_value()) break;
        out.push_back(std::move(**f));
      }
      if (off == bytes.size() && consumed == 0 && sent == 0) return out;
    }
  }

 private:
  FakePlatform platform_;
  std::vector<uint8_t> rx_, tx_, files_, fill_;
  std::unique_ptr<Agent> agent_ = std::make_unique<Agent>();
  std::unique_ptr<Session> session_ = std::make_unique<Session>();
  protocol::FrameDecoder decoder_;
};

Bytes FrameBytes(MsgType type, uint32_t id, const Bytes& payload, uint32_t flags = 0) {
  Frame f;
  f.type = type;
  f.id = id;
  f.flags = flags;
  f.payload = payload;
  return *protocol::EncodeFrame(f);
}

Bytes Chunk(uint32_t id, const char* path, uint64_t offset, size_t n, uint32_t flags) {
  protocol::FileWriteChunk c;
  if (path != nullptr) c.path = path;
  c.offset = offset;
  c.data.assign(n, 0x42);
  return FrameBytes(MsgType::kFileWrite, id, c.Encode(), flags);
}

Bytes Join(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<MsgType> TypesOf(const std::vector<Frame>& frames, uint32_t id) {
  std::vector<MsgType> out;
  for (const Frame& f : frames) {
    if (f.id == id) out.push_back(f.type);
  }
  return out;
}

const std::vector<MsgType> kJustAnError = {MsgType::kError};

TEST(TestGuestAgent, AWriteFrameRefusedWholeFailsItsStreamOnce) {
  // The middle frame is refused for its header (a reply flag) or for its
  // size (above our max_payload); the last one continues where the first
  // ended, so a stream that went on would commit and answer a second time.
  const Bytes refused[] = {
      Chunk(30, nullptr, 10, 10, protocol::kFlagMore | protocol::kFlagReply),
      Chunk(30, nullptr, 10, Session::kMaxRxPayload, protocol::kFlagMore)};
  for (const Bytes& middle : refused) {
    DirectGuest g;
    auto got = g.Send(Join({Chunk(30, "/w", 0, 10, protocol::kFlagMore), middle,
                            Chunk(30, nullptr, 10, 10, 0)}));
    EXPECT_EQ(TypesOf(got, 30), kJustAnError);
    auto stat = g.Send(FrameBytes(MsgType::kStat, 31,
                                  protocol::StatRequest{"/w"}.Encode()));
    ASSERT_EQ(TypesOf(stat, 31), kJustAnError) << "no file /w";
    EXPECT_EQ(protocol::ErrorReply::Decode(stat[0].payload)->code, protocol::ErrorCode::kNotFound);
  }
}

TEST(TestGuestAgent, StdinForAFinishedExecIsNeverAnsweredEvenWhenRefused) {
  DirectGuest g;
  protocol::ExecStartRequest req;
  req.argv = {"true"};
  req.stdin_streamed = true;
  auto exec = g.Send(FrameBytes(MsgType::kExecStart, 40, req.Encode()));
  ASSERT_EQ(TypesOf(exec, 40), (std::vector<MsgType>{MsgType::kExecStart, MsgType::kExecExit}));
  // A header the agent refuses, and a payload that does not decode: the
  // exec already has its whole answer, so neither gets another.
  const Bytes stdin_payload = protocol::ExecStdinChunk{{'x'}}.Encode();
  auto after = g.Send(Join({FrameBytes(MsgType::kExecStdin, 40, stdin_payload,
                                       protocol::kFlagMore | protocol::kFlagReply),
                            FrameBytes(MsgType::kExecStdin, 40, Bytes{1, 0, 0}, protocol::kFlagMore),
                            FrameBytes(MsgType::kExecStdin, 40, stdin_payload)}));
  EXPECT_EQ(TypesOf(after, 40), std::vector<MsgType>{});
}

TEST(TestGuestAgent, RefusedWriteStreamsStayQuietWhileOthersFail) {
  DirectGuest g;
  // Stream 50 holds the one write slot; 51 and 52 are refused at once and
  // their hosts keep sending until they read the ERROR.
  auto got = g.Send(Join({Chunk(50, "/a", 0, 4, protocol::kFlagMore),
                          Chunk(51, "/b", 0, 4, protocol::kFlagMore),
                          Chunk(52, "/c", 0, 4, protocol::kFlagMore),
                          Chunk(51, nullptr, 4, 4, protocol::kFlagMore),
                          Chunk(52, nullptr, 4, 4, protocol::kFlagMore),
                          Chunk(51, nullptr, 8, 4, 0), Chunk(52, nullptr, 8, 4, 0),
                          Chunk(50, nullptr, 4, 4, 0)}));
  EXPECT_EQ(TypesOf(got, 51), kJustAnError);
  EXPECT_EQ(TypesOf(got, 52), kJustAnError);
  EXPECT_EQ(TypesOf(got, 50), std::vector<MsgType>{MsgType::kFileWrite});
}

TEST(TestGuestAgent, AFirstChunkOnTheIdOfAFailedWriteStartsANewStream) {
  DirectGuest g;
  // The host stops sending at the ERROR (its last frame had MORE) ...
  EXPECT_EQ(TypesOf(g.Send(Chunk(60, "/no/../f", 0, 4, protocol::kFlagMore)), 60), kJustAnError);
  // ... and may use the id again: that stream is answered.
  auto got = g.Send(Chunk(60, "/f", 0, 4, 0));
  ASSERT_EQ(TypesOf(got, 60), std::vector<MsgType>{MsgType::kFileWrite});
  EXPECT_EQ(protocol::FileWriteReply::Decode(got[0].payload)->size, 4u);
}

}  // namespace
}  // namespace kubicle::guest::testguest
