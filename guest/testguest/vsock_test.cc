// VsockEndpoint: packet-level behaviour, and the real AgentClient talking to
// the test guest's agent through a simulated host vsock muxer.
#include "guest/testguest/vsock.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <deque>
#include <map>
#include <thread>
#include <vector>

#include "guest/client/agent_client.h"

namespace kubicle::guest::testguest {
namespace {

using protocol::Bytes;
using namespace std::chrono_literals;

constexpr uint64_t kGuestCid = 3;
constexpr uint32_t kPort = protocol::kAgentVsockPort;

class FakePlatform : public Platform {
 public:
  bool ReadEntropy(uint8_t* out, uint32_t n) override {
    for (uint32_t i = 0; i < n; ++i) out[i] = uint8_t(i);
    return true;
  }
  uint32_t CpusRunning() override { return 1; }
  uint64_t UptimeNs() override { return 0; }
};

struct Packet {
  virtio::VsockHeader hdr{};
  Bytes data;
};

class FakeTx : public VsockTx {
 public:
  bool Send(const virtio::VsockHeader& hdr, const uint8_t* data, uint32_t len) override {
    if (packets.size() >= limit) return false;
    EXPECT_EQ(hdr.len, len);
    packets.push_back({hdr, Bytes(data, data + len)});
    return true;
  }
  std::deque<Packet> packets;
  size_t limit = SIZE_MAX;
};

// A guest: agent + sessions + endpoint, with host-allocated buffers.
struct Guest {
  Guest() {
    bufs.resize(VsockEndpoint::kMaxConnections * (Session::kRxCap + Session::kTxCap));
    files.resize(RamFs::kDataBytes);
    AgentConfig cfg;
    cfg.cid = kGuestCid;
    cfg.file_data = files.data();
    agent->Init(&platform, cfg);
    for (uint32_t i = 0; i < VsockEndpoint::kMaxConnections; ++i) {
      uint8_t* base = bufs.data() + i * (Session::kRxCap + Session::kTxCap);
      sessions[i].Attach(base, base + Session::kRxCap);
    }
    ep->Init(agent.get(), sessions.get(), kGuestCid, kPort);
  }
  void Deliver(const virtio::VsockHeader& h, const Bytes& data = {}) {
    uint8_t raw[virtio::kVsockHeaderSize];
    EncodeVsockHdr(h, raw);
    ep->OnPacket(raw, data.data(), uint32_t(data.size()));
  }
  FakePlatform platform;
  std::unique_ptr<Agent> agent = std::make_unique<Agent>();
  std::unique_ptr<Session[]> sessions = std::make_unique<Session[]>(VsockEndpoint::kMaxConnections);
  std::unique_ptr<VsockEndpoint> ep = std::make_unique<VsockEndpoint>();
  std::vector<uint8_t> bufs, files;
};

virtio::VsockHeader FromHost(uint16_t op, uint32_t src_port, uint32_t len = 0) {
  virtio::VsockHeader h{};
  h.src_cid = protocol::kHostCid;
  h.dst_cid = kGuestCid;
  h.src_port = src_port;
  h.dst_port = kPort;
  h.type = virtio::kVsockTypeStream;
  h.op = op;
  h.len = len;
  h.buf_alloc = 1 << 20;
  return h;
}

Bytes PingFrame(uint32_t id) {
  return *protocol::EncodeFrame(protocol::MakeFrame(protocol::PingRequest{99}, id));
}

TEST(VsockEndpoint, HeaderRoundTrip) {
  virtio::VsockHeader h = FromHost(virtio::kVsockOpRw, 7, 12);
  h.flags = 3;
  h.fwd_cnt = 0xdeadbeef;
  uint8_t raw[virtio::kVsockHeaderSize];
  EncodeVsockHdr(h, raw);
  EXPECT_EQ(raw[0], 2);   // src_cid little-endian
  EXPECT_EQ(raw[30], virtio::kVsockOpRw);
  virtio::VsockHeader d = DecodeVsockHdr(raw);
  EXPECT_EQ(d.fwd_cnt, 0xdeadbeefu);
  EXPECT_EQ(d.len, 12u);
  EXPECT_EQ(d.flags, 3u);
}

TEST(VsockEndpoint, AcceptsHostRequestAndAnswersFrames) {
  Guest g;
  FakeTx tx;
  g.Deliver(FromHost(virtio::kVsockOpRequest, 5000));
  ASSERT_TRUE(g.ep->Pump(&tx));
  ASSERT_EQ(tx.packets.size(), 1u);
  const virtio::VsockHeader& r = tx.packets[0].hdr;
  EXPECT_EQ(r.op, virtio::kVsockOpResponse);
  EXPECT_EQ(r.src_cid, kGuestCid);
  EXPECT_EQ(r.dst_cid, protocol::kHostCid);
  EXPECT_EQ(r.src_port, kPort);
  EXPECT_EQ(r.dst_port, 5000u);
  EXPECT_EQ(r.buf_alloc, Session::kRxCap);
  tx.packets.clear();

  Bytes ping = PingFrame(1);
  g.Deliver(FromHost(virtio::kVsockOpRw, 5000, uint32_t(ping.size())), ping);
  ASSERT_TRUE(g.ep->Pump(&tx));
  ASSERT_EQ(tx.packets.size(), 1u);
  EXPECT_EQ(tx.packets[0].hdr.op, virtio::kVsockOpRw);
  EXPECT_EQ(tx.packets[0].hdr.fwd_cnt, ping.size());  // the credit travels with the reply
  protocol::FrameDecoder dec;
  dec.Append(tx.packets[0].data);
  auto f = dec.Next();
  ASSERT_TRUE(f.ok() && f->has_value());
  EXPECT_EQ((*f)->type, protocol::MsgType::kPong);
  EXPECT_EQ(protocol::PongReply::Decode((*f)->payload)->nonce, 99u);
}

TEST(VsockEndpoint, RefusesWhatItShould) {
  Guest g;
  FakeTx tx;
  virtio::VsockHeader other = FromHost(virtio::kVsockOpRequest, 1);
  other.src_cid = 5;  // not the host
  g.Deliver(other);
  virtio::VsockHeader wrong_port = FromHost(virtio::kVsockOpRequest, 2);
  wrong_port.dst_port = 80;
  g.Deliver(wrong_port);
  g.Deliver(FromHost(virtio::kVsockOpRw, 3, 1), Bytes{1});  // no connection
  g.Deliver(FromHost(virtio::kVsockOpRst, 4));               // RST is never answered
  g.ep->Pump(&tx);
  ASSERT_EQ(tx.packets.size(), 3u);
  for (const Packet& p : tx.packets) EXPECT_EQ(p.hdr.op, virtio::kVsockOpRst);
  EXPECT_EQ(g.ep->active(), 0u);
  // Wrong CID and a header claiming more data than delivered are dropped.
  virtio::VsockHeader wrong_cid = FromHost(virtio::kVsockOpRequest, 6);
  wrong_cid.dst_cid = 99;
  g.Deliver(wrong_cid);
  g.Deliver(FromHost(virtio::kVsockOpRw, 7, 100), Bytes(10));
  EXPECT_EQ(g.ep->dropped_packets(), 2u);
}

TEST(VsockEndpoint, AtMostEightConnections) {
  Guest g;
  FakeTx tx;
  for (uint32_t p = 0; p < 9; ++p) g.Deliver(FromHost(virtio::kVsockOpRequest, 100 + p));
  g.ep->Pump(&tx);
  int responses = 0, rsts = 0;
  for (const Packet& p : tx.packets) {
    responses += p.hdr.op == virtio::kVsockOpResponse;
    rsts += p.hdr.op == virtio::kVsockOpRst && p.hdr.dst_port == 108;
  }
  EXPECT_EQ(responses, 8);
  EXPECT_EQ(rsts, 1);
  EXPECT_EQ(g.ep->active(), 8u);
}

TEST(VsockEndpoint, RespectsPeerCredit) {
  Guest g;
  FakeTx tx;
  virtio::VsockHeader req = FromHost(virtio::kVsockOpRequest, 5000);
  req.buf_alloc = 10;  // the host can take only 10 bytes at a time
  g.Deliver(req);
  g.ep->Pump(&tx);
  tx.packets.clear();
  Bytes ping = PingFrame(1);
  virtio::VsockHeader rw = FromHost(virtio::kVsockOpRw, 5000, uint32_t(ping.size()));
  rw.buf_alloc = 10;
  g.Deliver(rw, ping);
  g.ep->Pump(&tx);
  ASSERT_EQ(tx.packets.size(), 1u);
  EXPECT_EQ(tx.packets[0].data.size(), 10u);
  tx.packets.clear();
  g.ep->Pump(&tx);
  EXPECT_TRUE(tx.packets.empty());  // no credit, nothing sent
  virtio::VsockHeader credit = FromHost(virtio::kVsockOpCreditUpdate, 5000);
  credit.buf_alloc = 10;
  credit.fwd_cnt = 10;
  g.Deliver(credit);
  g.ep->Pump(&tx);
  ASSERT_EQ(tx.packets.size(), 1u);
  EXPECT_EQ(tx.packets[0].data.size(), 10u);
  // A credit request is answered with a credit update.
  tx.packets.clear();
  virtio::VsockHeader ask = FromHost(virtio::kVsockOpCreditRequest, 5000);
  ask.buf_alloc = 10;
  ask.fwd_cnt = 10;  // still 10 bytes in flight: no credit for data
  g.Deliver(ask);
  g.ep->Pump(&tx);
  ASSERT_EQ(tx.packets.size(), 1u);
  EXPECT_EQ(tx.packets[0].hdr.op, virtio::kVsockOpCreditUpdate);
  EXPECT_EQ(tx.packets[0].hdr.fwd_cnt, ping.size());
}

TEST(VsockEndpoint, PeerIgnoringOurCreditIsReset) {
  Guest g;
  FakeTx tx;
  g.Deliver(FromHost(virtio::kVsockOpRequest, 5000));
  g.ep->Pump(&tx);
  tx.packets.clear();
  // Fill the session with a frame header announcing a big payload, then overrun.
  Bytes chunk(4096, 0);
  uint32_t sent = 0;
  while (sent + chunk.size() <= Session::kRxCap) {
    g.Deliver(FromHost(virtio::kVsockOpRw, 5000, 4096), chunk);
    sent += 4096;
  }
  g.Deliver(FromHost(virtio::kVsockOpRw, 5000, 4096), chunk);
  g.ep->Pump(&tx);
  ASSERT_FALSE(tx.packets.empty());
  EXPECT_EQ(tx.packets.back().hdr.op, virtio::kVsockOpRst);
  EXPECT_EQ(g.ep->active(), 0u);
}

TEST(VsockEndpoint, ShutdownRstAndTransportReset) {
  Guest g;
  FakeTx tx;
  g.Deliver(FromHost(virtio::kVsockOpRequest, 1));
  g.Deliver(FromHost(virtio::kVsockOpRequest, 2));
  g.Deliver(FromHost(virtio::kVsockOpRequest, 3));
  g.ep->Pump(&tx);
  tx.packets.clear();
  virtio::VsockHeader shut = FromHost(virtio::kVsockOpShutdown, 1);
  shut.flags = virtio::kVsockShutdownRcv | virtio::kVsockShutdownSend;
  g.Deliver(shut);
  g.Deliver(FromHost(virtio::kVsockOpRst, 2));
  g.ep->Pump(&tx);
  ASSERT_EQ(tx.packets.size(), 1u);
  EXPECT_EQ(tx.packets[0].hdr.op, virtio::kVsockOpRst);
  EXPECT_EQ(tx.packets[0].hdr.dst_port, 1u);
  EXPECT_EQ(g.ep->active(), 1u);

  g.ep->OnTransportReset();
  g.ep->SetCid(7);
  EXPECT_EQ(g.ep->active(), 0u);
  tx.packets.clear();
  g.Deliver(FromHost(virtio::kVsockOpRequest, 4));  // still addressed to the old CID 3
  EXPECT_EQ(g.ep->dropped_packets(), 1u);
  virtio::VsockHeader fresh = FromHost(virtio::kVsockOpRequest, 4);
  fresh.dst_cid = 7;
  g.Deliver(fresh);
  g.ep->Pump(&tx);
  ASSERT_EQ(tx.packets.size(), 1u);
  EXPECT_EQ(tx.packets[0].hdr.op, virtio::kVsockOpResponse);
  EXPECT_EQ(tx.packets[0].hdr.src_cid, 7u);
}

TEST(VsockEndpoint, HalfCloseAnswersThenResets) {
  Guest g;
  FakeTx tx;
  g.Deliver(FromHost(virtio::kVsockOpRequest, 9));
  g.ep->Pump(&tx);  // RESPONSE: a real host sends data only after it
  Bytes ping = PingFrame(1);
  g.Deliver(FromHost(virtio::kVsockOpRw, 9, uint32_t(ping.size())), ping);
  virtio::VsockHeader shut = FromHost(virtio::kVsockOpShutdown, 9);
  shut.flags = virtio::kVsockShutdownSend;
  g.Deliver(shut);
  g.ep->Pump(&tx);
  ASSERT_EQ(tx.packets.size(), 3u);
  EXPECT_EQ(tx.packets[0].hdr.op, virtio::kVsockOpResponse);
  EXPECT_EQ(tx.packets[1].hdr.op, virtio::kVsockOpRw);
  EXPECT_EQ(tx.packets[2].hdr.op, virtio::kVsockOpRst);
}

TEST(VsockEndpoint, TxQueueFullLosesNothing) {
  Guest g;
  FakeTx tx;
  tx.limit = 0;
  g.Deliver(FromHost(virtio::kVsockOpRequest, 5000));
  EXPECT_FALSE(g.ep->Pump(&tx));
  tx.limit = SIZE_MAX;
  EXPECT_TRUE(g.ep->Pump(&tx));
  ASSERT_EQ(tx.packets.size(), 1u);
  EXPECT_EQ(tx.packets[0].hdr.op, virtio::kVsockOpResponse);
}

// Plays the VMM's vsock device and host muxer: each host socket is one vsock
// connection (CONNECT already done); bytes flow as RW packets under credit.
class Muxer {
 public:
  explicit Muxer(Guest* g) : g_(g) {}
  ~Muxer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::unique_ptr<client::AgentClient> Connect() {
    int sv[2];
    EXPECT_EQ(0, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    {
      std::lock_guard l(mu_);
      const uint32_t port = 2000 + uint32_t(conns_.size());
      conns_[port].fd = UniqueFd(sv[0]);
      g_->Deliver(FromHost(virtio::kVsockOpRequest, port));
    }
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    auto c = client::AgentClient::Adopt(UniqueFd(sv[1]));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

 private:
  struct HostConn {
    UniqueFd fd;
    uint32_t tx_cnt = 0, fwd_cnt = 0, fwd_sent = 0;
    uint32_t guest_buf_alloc = 0, guest_fwd_cnt = 0;
    bool open = false;
  };
  void Run() {
    while (!stop_) {
      std::lock_guard l(mu_);
      for (auto& [port, c] : conns_) {
        if (!c.open || !c.fd) continue;
        const uint32_t credit = c.guest_buf_alloc - (c.tx_cnt - c.guest_fwd_cnt);
        if (credit == 0) continue;
        uint8_t buf[4096];
        const ssize_t n = ::recv(c.fd.get(), buf, std::min<size_t>(sizeof(buf), credit), MSG_DONTWAIT);
        if (n <= 0) continue;
        virtio::VsockHeader h = FromHost(virtio::kVsockOpRw, port, uint32_t(n));
        h.fwd_cnt = c.fwd_cnt;
        g_->Deliver(h, Bytes(buf, buf + n));
        c.tx_cnt += uint32_t(n);
      }
      g_->ep->Pump(&tx_);
      while (!tx_.packets.empty()) {
        Packet p = std::move(tx_.packets.front());
        tx_.packets.pop_front();
        HostConn& c = conns_[p.hdr.dst_port];
        c.guest_buf_alloc = p.hdr.buf_alloc;
        c.guest_fwd_cnt = p.hdr.fwd_cnt;
        if (p.hdr.op == virtio::kVsockOpResponse) c.open = true;
        if (p.hdr.op == virtio::kVsockOpRst) c.fd.reset();
        if (p.hdr.op == virtio::kVsockOpRw && c.fd) {
          ASSERT_EQ(::send(c.fd.get(), p.data.data(), p.data.size(), MSG_NOSIGNAL),
                    ssize_t(p.data.size()));
          c.fwd_cnt += uint32_t(p.data.size());
        }
      }
      for (auto& [port, c] : conns_) {
        if (c.open && c.fwd_cnt - c.fwd_sent > 64 * 1024) {
          virtio::VsockHeader h = FromHost(virtio::kVsockOpCreditUpdate, port);
          h.fwd_cnt = c.fwd_sent = c.fwd_cnt;
          g_->Deliver(h);
        }
      }
      std::this_thread::sleep_for(50us);
    }
  }
  Guest* g_;
  FakeTx tx_;
  std::mutex mu_;
  std::map<uint32_t, HostConn> conns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(VsockEndpoint, AgentClientsOverSimulatedVsock) {
  Guest g;
  Muxer mux(&g);
  auto a = mux.Connect();
  auto b = mux.Connect();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->agent().name, "kubicle-testguest");
  Bytes big(64 * 1024);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i ^ (i >> 8));
  std::thread ta([&] {
    for (int i = 0; i < 5; ++i) {
      EXPECT_TRUE(a->WriteFile("/a" + std::to_string(i), big).ok());
      auto back = a->ReadFile("/a" + std::to_string(i));
      EXPECT_TRUE(back.ok() && *back == big);
    }
  });
  for (int i = 0; i < 50; ++i) {
    auto e = b->Echo(Bytes(5000, uint8_t(i)));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(*e, Bytes(5000, uint8_t(i)));
  }
  ta.join();
  auto id = b->Identity();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->cid, kGuestCid);
  EXPECT_EQ(g.ep->active(), 2u);
}

}  // namespace
}  // namespace kubicle::guest::testguest
