// Randomised hostile input against the test guest's framing and handler
// (and the host codec): random bytes, and valid frames with random
// corruption. Nothing may crash or overrun (run under ASan/UBSan with
// -DKUBICLE_SANITIZE=ON); every consumed frame yields replies that parse.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"
#include "guest/protocol/tlv.h"
#include "guest/testguest/agent.h"

namespace kubicle::guest::testguest {
namespace {

using protocol::Bytes;
using protocol::MsgType;

class Rng : public Platform {
 public:
  bool ReadEntropy(uint8_t* out, uint32_t n) override {
    for (uint32_t i = 0; i < n; ++i) out[i] = uint8_t(i);
    return true;
  }
  uint32_t CpusRunning() override { return 1; }
  uint64_t UptimeNs() override { return 0; }
  // Two 16-sector disks (the second read-only) that check what the agent
  // promises: a valid index and 1..kMaxDiskSectors sectors per request.
  uint32_t DiskCount() override { return 2; }
  const DiskProperties* Disk(uint32_t i) override { return i < 2 ? &props[i] : nullptr; }
  DiskResult DiskRead(uint32_t i, uint64_t sector, uint32_t count, uint8_t* out) override {
    if (!Valid(i, sector, count)) return DiskResult::kIoError;
    std::copy_n(disk[i].begin() + std::ptrdiff_t(sector * 512), count * 512, out);
    return DiskResult::kOk;
  }
  DiskResult DiskWrite(uint32_t i, uint64_t sector, uint32_t count, const uint8_t* d) override {
    if (!Valid(i, sector, count) || props[i].read_only) return DiskResult::kIoError;
    std::copy_n(d, count * 512, disk[i].begin() + std::ptrdiff_t(sector * 512));
    return DiskResult::kOk;
  }
  DiskResult DiskFlush(uint32_t i) override {
    return i < 2 ? DiskResult::kOk : DiskResult::kBroken;
  }

 private:
  bool Valid(uint32_t i, uint64_t sector, uint32_t count) {
    EXPECT_LT(i, 2u);
    EXPECT_TRUE(count >= 1 && count <= protocol::kMaxDiskSectors) << count;
    return i < 2 && sector <= 16 && count <= 16 - sector;
  }
  DiskProperties props[2] = {{16, false, "a"}, {16, true, "b"}};
  Bytes disk[2] = {Bytes(16 * 512, 1), Bytes(16 * 512, 2)};
};

struct Guest {
  Guest() : rx(Session::kRxCap), tx(Session::kTxCap), files(RamFs::kDataBytes), fill(1 << 16) {
    AgentConfig cfg;
    cfg.fill_area = fill.data();
    cfg.fill_area_size = fill.size();
    cfg.file_data = files.data();
    agent->Init(&platform, cfg);
    session->Attach(rx.data(), tx.data());
    session->Reset(agent.get());
  }
  // Feeds bytes as a transport would and collects every reply byte.
  void Feed(const Bytes& in, Bytes* out) {
    size_t off = 0;
    while (off < in.size() && !session->close_requested()) {
      const uint32_t n = std::min<uint32_t>(session->RxFree(), uint32_t(in.size() - off));
      session->Receive(in.data() + off, n);
      off += n;
      session->Process(agent.get());
      out->insert(out->end(), session->TxData(), session->TxData() + session->TxSize());
      session->TxConsume(session->TxSize());
      session->Process(agent.get());
      out->insert(out->end(), session->TxData(), session->TxData() + session->TxSize());
      session->TxConsume(session->TxSize());
      if (n == 0) break;  // nothing fits and nothing drains: a stuck partial frame
    }
  }
  Rng platform;
  std::unique_ptr<Agent> agent = std::make_unique<Agent>();
  std::unique_ptr<Session> session = std::make_unique<Session>();
  std::vector<uint8_t> rx, tx, files, fill;
};

Bytes ValidFrame(std::mt19937_64& rng, uint32_t id) {
  protocol::Frame f;
  f.id = id;
  switch (rng() % 10) {
    case 0: f = protocol::MakeFrame(protocol::PingRequest{rng()}, id); break;
    case 1: f = protocol::MakeFrame(protocol::EchoMessage{Bytes(rng() % 300, 7)}, id); break;
    case 2: {
      protocol::FileWriteChunk c;
      c.path = "/f" + std::to_string(rng() % 20);
      c.data = Bytes(rng() % 200, 1);
      f = protocol::MakeFrame(c, id);
      break;
    }
    case 3: f = protocol::MakeFrame(protocol::FileReadRequest{"/f" + std::to_string(rng() % 20)}, id); break;
    case 4: f = protocol::MakeFrame(protocol::ListRequest{"/"}, id); break;
    case 5: f = protocol::MakeFrame(protocol::MemFillRequest{rng(), (rng() % 100) * 8}, id); break;
    case 6: f = protocol::MakeFrame(protocol::IdentityRequest{}, id); break;
    case 7:
      f = protocol::MakeFrame(
          protocol::DiskReadRequest{uint32_t(rng() % 3), rng() % 20, uint32_t(1 + rng() % 20)}, id);
      break;
    case 8:
      f = protocol::MakeFrame(protocol::DiskWriteRequest{uint32_t(rng() % 3), rng() % 20,
                                                         Bytes((rng() % 3) * 512, 5), rng() % 2 == 0},
                              id);
      break;
    default: f = protocol::MakeFrame(protocol::HelloRequest{}, id); break;
  }
  return *protocol::EncodeFrame(f);
}

// Every reply stream must parse as frames with well-formed TLV payloads.
void CheckReplies(const Bytes& out) {
  protocol::FrameDecoder dec;
  dec.Append(out);
  for (;;) {
    auto f = dec.Next();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    if (!f->has_value()) break;
    EXPECT_TRUE((*f)->is_reply());
    EXPECT_EQ(protocol::ValidateTlvs((*f)->payload.data(), (*f)->payload.size()),
              protocol::WireError::kOk);
    if ((*f)->type == MsgType::kError) {
      EXPECT_TRUE(protocol::ErrorReply::Decode((*f)->payload).ok());
    }
  }
  EXPECT_EQ(dec.buffered(), 0u) << "a reply frame was cut short";
}

TEST(HostileInput, CorruptedFramesNeverBreakTheGuest) {
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 300; ++round) {
    Guest g;
    Bytes stream;
    for (int i = 0; i < 20; ++i) {
      Bytes f = ValidFrame(rng, uint32_t(1 + i));
      // Corrupt payload bytes only (header corruption is tested separately):
      // the framing survives, the agent must answer every frame.
      for (int k = 0, flips = int(rng() % 4); k < flips && f.size() > protocol::kHeaderSize; ++k) {
        f[protocol::kHeaderSize + rng() % (f.size() - protocol::kHeaderSize)] = uint8_t(rng());
      }
      stream.insert(stream.end(), f.begin(), f.end());
    }
    Bytes out;
    g.Feed(stream, &out);
    EXPECT_FALSE(g.session->close_requested());
    CheckReplies(out);
    if (HasFatalFailure()) return;
  }
}

TEST(HostileInput, RandomBytesCloseCleanly) {
  std::mt19937_64 rng(777);
  for (int round = 0; round < 300; ++round) {
    Guest g;
    Bytes junk(rng() % 2000);
    for (auto& b : junk) b = uint8_t(rng());
    if (round % 3 == 0 && junk.size() >= 4) {  // valid magic, garbage after
      junk[0] = 'K';
      junk[1] = 'B';
      junk[2] = 'A';
      junk[3] = 'P';
    }
    Bytes out;
    g.Feed(junk, &out);
    CheckReplies(out);
    if (HasFatalFailure()) return;
  }
}

// What a host decoder must do with any payload: refuse it as
// InvalidArgument with a message (messages.h), or return a message that
// re-encodes to bytes which decode to the same encoding. Counts each.
struct DecodeTally {
  int accepted = 0, refused = 0;
};

template <typename M>
void CheckDecode(protocol::ByteSpan p, DecodeTally* tally) {
  auto m = M::Decode(p);
  if (!m.ok()) {
    ++tally->refused;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().ToString();
    EXPECT_FALSE(m.status().message().empty());
    return;
  }
  ++tally->accepted;
  const Bytes once = m->Encode();
  auto again = M::Decode(once);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->Encode(), once);
}

template <typename... M>
void CheckDecodeAll(protocol::ByteSpan p, DecodeTally* tally) {
  (CheckDecode<M>(p, tally), ...);
}

TEST(HostileInput, HostDecodersSurviveRandomPayloads) {
  std::mt19937_64 rng(99);
  DecodeTally tally;
  for (int round = 0; round < 3000; ++round) {
    // Random TLV soup: sometimes well-formed with random tags and lengths.
    protocol::TlvBuilder b;
    for (int i = 0, n = int(rng() % 6); i < n; ++i) {
      b.Bytes(protocol::Tag(rng() % 0x80), Bytes(rng() % 12, uint8_t(rng())));
    }
    Bytes p = b.Take();
    if (!p.empty() && rng() % 2) p[rng() % p.size()] = uint8_t(rng());
    CheckDecodeAll<protocol::HelloRequest, protocol::HelloReply, protocol::ErrorReply,
                   protocol::ExecStartRequest, protocol::ExecExitReply, protocol::FileWriteChunk,
                   protocol::FileReadChunk, protocol::StatReply, protocol::ListReply,
                   protocol::IdentityReply, protocol::PostRestoreRequest, protocol::MemChecksumReply,
                   protocol::DiskInfoReply, protocol::DiskReadRequest, protocol::DiskReadReply,
                   protocol::DiskWriteRequest, protocol::DiskWriteReply>(p, &tally);
    if (HasFatalFailure()) return;
  }
  // Both answers were exercised, so the checks above ran.
  EXPECT_GT(tally.accepted, 0);
  EXPECT_GT(tally.refused, 0);
}

}  // namespace
}  // namespace kubicle::guest::testguest
