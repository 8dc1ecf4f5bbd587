// Hostile peers against the API's front door (issue 10): an in-process
// ApiServer over FakeSandboxService, attacked with raw sockets so the test
// itself buffers nothing. Each attack asserts the answer, that the server
// read little of what was sent, and that the process's RSS stayed bounded.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/unique_fd.h"
#include "noderuntime/server/api_server.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"

namespace kubicle::noderuntime::server {

using testing::FakeSandboxService;
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr char kAdmin[] = "admin-secret-token";
constexpr size_t kMiB = 1 << 20;
constexpr size_t kRssBound = 32 * kMiB;

size_t RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// A raw TCP client that never buffers more than one small chunk.
class Peer {
 public:
  explicit Peer(int port, int rcvbuf = 0) {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (rcvbuf > 0) ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    int one = 1;
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::fcntl(fd_.get(), F_SETFL, O_NONBLOCK);
  }
  bool connected() const { return connected_; }
  int fd() const { return fd_.get(); }

  // Sends all of `data` within `timeout`; false if the peer stopped it.
  bool Send(std::string_view data, std::chrono::milliseconds timeout = 5s) {
    auto deadline = Clock::now() + timeout;
    while (!data.empty()) {
      ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(size_t(n));
        sent_ += size_t(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN) return false;
      if (Clock::now() >= deadline) return false;
      pollfd p{fd_.get(), POLLOUT, 0};
      ::poll(&p, 1, 20);
    }
    return true;
  }
  // Sends `head`, then `filler` over and over (up to `total` bytes) until the
  // server answers or stops reading. Returns the answer's first bytes.
  std::string FloodUntilAnswered(std::string_view head, std::string_view filler, size_t total,
                                 std::chrono::milliseconds timeout = 20s) {
    auto deadline = Clock::now() + timeout;
    if (!Send(head)) return ReadSome(1s);
    while (sent_ < total && Clock::now() < deadline) {
      pollfd p{fd_.get(), POLLIN | POLLOUT, 0};
      ::poll(&p, 1, 50);
      if (p.revents & (POLLIN | POLLHUP | POLLERR)) break;
      if (p.revents & POLLOUT) {
        ssize_t n = ::send(fd_.get(), filler.data(), filler.size(), MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) break;
        if (n > 0) sent_ += size_t(n);
      }
    }
    return ReadSome(2s);
  }
  // What arrives within `timeout` (stops at the first pause after data).
  std::string ReadSome(std::chrono::milliseconds timeout) {
    std::string out;
    auto deadline = Clock::now() + timeout;
    char buf[16384];
    while (Clock::now() < deadline) {
      pollfd p{fd_.get(), POLLIN, 0};
      int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                         .count());
      if (::poll(&p, 1, out.empty() ? std::max(left, 1) : 100) <= 0) {
        if (!out.empty()) break;
        continue;
      }
      ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, size_t(n));
    }
    return out;
  }
  // Reads until the end of a response head (or 64 KiB): never the body.
  std::string ReadHead(std::chrono::milliseconds timeout) {
    std::string out;
    auto deadline = Clock::now() + timeout;
    char c;
    while (Clock::now() < deadline && out.size() < 65536 &&
           out.find("\r\n\r\n") == std::string::npos) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      if (::recv(fd_.get(), &c, 1, 0) != 1) break;
      out.push_back(c);
    }
    return out;
  }
  // True once the server has closed (EOF or reset), within `timeout`.
  // Whatever arrives before is discarded.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    char buf[16384];
    while (Clock::now() < deadline) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
    return false;
  }
  size_t sent() const { return sent_; }

 private:
  UniqueFd fd_;
  bool connected_ = false;
  size_t sent_ = 0;
};

int StatusOf(const std::string& answer) {
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || answer.size() < 12) return 0;
  return std::stoi(answer.substr(9, 3));
}

std::string Get(const std::string& path, const std::string& token = "") {
  std::string r = "GET " + path + " HTTP/1.1\r\nHost: x\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  return r + "\r\n";
}

class FrontDoorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A thousand connections each way: make sure the descriptors are there.
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 8192 && rl.rlim_max > rl.rlim_cur) {
      rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 8192);
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  void SetUp() override { Start(Options()); }
  void TearDown() override {
    if (server_) server_->Stop(10s);
  }
  static ApiServerOptions Options() {
    ApiServerOptions o;
    o.admin_token = kAdmin;
    o.max_json_bytes = 64 << 10;
    o.max_file_bytes = 1 << 20;
    o.header_timeout = 2s;
    o.idle_timeout = 5s;
    o.body_timeout = 2s;
    o.write_timeout = 2s;
    return o;
  }
  void Start(ApiServerOptions o) {
    server_.reset();
    registry_ = std::make_unique<metrics::Registry>();  // one server per registry
    server_ = std::make_unique<ApiServer>(&fake_, registry_.get(), o);
    Status st = Status::Unavailable("no attempt");
    for (int attempt = 0; attempt < 5 && !st.ok(); ++attempt) {
      port_ = *PickFreePort();
      st = server_->Start("127.0.0.1", port_);
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  // One request on a fresh connection; the status code (0: no answer).
  int Ask(const std::string& request, std::chrono::milliseconds timeout = 3s,
          std::string* answer = nullptr) {
    Peer p(port_);
    if (!p.connected() || !p.Send(request)) return 0;
    std::string a = p.ReadSome(timeout);
    if (answer) *answer = a;
    return StatusOf(a);
  }
  // A sandbox via the admin token; returns its data-plane token.
  std::string NewSandbox(const std::string& id) {
    const std::string tpl = R"({"kernel":"/k"})";
    if (Ask("PUT /v1/templates/tg HTTP/1.1\r\nAuthorization: Bearer " + std::string(kAdmin) +
            "\r\nContent-Length: " + std::to_string(tpl.size()) + "\r\n\r\n" + tpl) == 0) {
      ADD_FAILURE() << "no answer to the template put";
    }
    std::string body = R"({"template":"tg","id":")" + id + "\"}";
    std::string a;
    Ask("POST /v1/sandboxes HTTP/1.1\r\nAuthorization: Bearer " + std::string(kAdmin) +
            "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
        3s, &a);
    auto j = json::parse(a.substr(a.find("\r\n\r\n") + 4), nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("token")) << a;
    return j.is_object() ? j.value("token", "") : "";
  }
  std::string Exec(const std::string& id, const std::string& token, bool stream = false) {
    std::string body = R"({"argv":["echo","hi"]})";
    return "POST /v1/sandboxes/" + id + "/exec" + (stream ? "?stream=true" : "") +
           " HTTP/1.1\r\nAuthorization: Bearer " + token +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  FakeSandboxService fake_;
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<ApiServer> server_;
  int port_ = 0;
};

TEST_F(FrontDoorTest, HugeHeaderIs431WithBoundedMemory) {
  const size_t rss0 = RssBytes();
  Peer p(port_);
  std::string filler(64 << 10, 'a');
  std::string a = p.FloodUntilAnswered("GET /healthz HTTP/1.1\r\nX-Fill: ", filler, 200 * kMiB);
  EXPECT_EQ(StatusOf(a), 431) << a.substr(0, 200);
  EXPECT_LT(p.sent(), 32 * kMiB) << "the server kept reading the header";
  EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kRssBound);
  EXPECT_TRUE(p.ClosedWithin(5s));
  EXPECT_EQ(Ask(Get("/healthz")), 200);
}

TEST_F(FrontDoorTest, ManyHeaderFieldsAreCappedToo) {
  Peer p(port_);
  std::string filler;
  for (int i = 0; i < 2000; ++i) filler += "X-F" + std::to_string(i) + ": v\r\n";
  std::string a = p.FloodUntilAnswered("GET /healthz HTTP/1.1\r\n", filler, 50 * kMiB);
  EXPECT_EQ(StatusOf(a), 431) << a.substr(0, 200);
}

TEST_F(FrontDoorTest, HugeChunkedBodiesAreRefusedBeforeTheyAreRead) {
  const size_t rss0 = RssBytes();
  std::string chunk = "10000\r\n" + std::string(0x10000, 'x') + "\r\n";
  struct Case {
    std::string head;
    int want;
  } cases[] = {
      // No token, and /healthz takes neither POST nor a body.
      {"POST /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 405},
      {"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 413},
      // No token: 401 before any body byte.
      {"POST /v1/sandboxes HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 401},
      {"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 300000000\r\n\r\n", 401},
      // The admin token: the declared size is refused at once, a chunked one
      // once it passes max_json_bytes.
      {"POST /v1/sandboxes HTTP/1.1\r\nAuthorization: Bearer " + std::string(kAdmin) +
           "\r\nContent-Length: 300000000\r\n\r\n",
       413},
      {"POST /v1/sandboxes HTTP/1.1\r\nAuthorization: Bearer " + std::string(kAdmin) +
           "\r\nTransfer-Encoding: chunked\r\n\r\n",
       413},
  };
  for (const auto& c : cases) {
    Peer p(port_);
    // The node keeps answering others while the attack is in progress (the
    // admin's chunked body is one chunk short of its cap here).
    ASSERT_TRUE(p.Send(c.head + chunk)) << c.head;
    EXPECT_EQ(Ask(Get("/healthz")), 200) << "while " << c.head;
    std::string a = p.FloodUntilAnswered("", chunk, 256 * kMiB);
    EXPECT_EQ(StatusOf(a), c.want) << c.head << a.substr(0, 300);
    EXPECT_LT(p.sent(), 32 * kMiB) << c.head;
    EXPECT_NE(a.find("Connection: close"), std::string::npos) << a.substr(0, 300);
    EXPECT_TRUE(p.ClosedWithin(5s)) << c.head;
  }
  EXPECT_EQ(fake_.sandbox_count(), 0u);
  EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kRssBound);
}

TEST_F(FrontDoorTest, RefusedRequestClosesTheConnection) {
  Peer p(port_);
  ASSERT_TRUE(p.Send(Get("/v1/sandboxes") + Get("/healthz")));  // pipelined after a refusal
  std::string a = p.ReadSome(2s);
  EXPECT_EQ(StatusOf(a), 401);
  EXPECT_EQ(a.find("HTTP/1.1 200"), std::string::npos) << "a request after a refusal was served";
  EXPECT_TRUE(p.ClosedWithin(3s));
}

// After a refusal the server reads and discards for at most linger_timeout
// (1 s), whatever the client keeps sending: a thousand refused clients that
// trickle on forever are all closed, cost no buffers, and lock nobody out.
TEST_F(FrontDoorTest, LingeringRefusalsEndAtTheirDeadline) {
  const size_t rss0 = RssBytes();
  const std::string refused = "POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n";
  std::vector<std::unique_ptr<Peer>> peers;
  for (int i = 0; i < 1000; ++i) {
    peers.push_back(std::make_unique<Peer>(port_));
    ASSERT_TRUE(peers.back()->connected()) << i;
    ASSERT_TRUE(peers.back()->Send(refused)) << i;
  }
  EXPECT_EQ(StatusOf(peers.front()->ReadHead(3s)), 401);
  // Each open peer sends 1 KiB every 50 ms (far below the 4 MiB discard
  // cap) until the server has closed it. The answer ends in EOF (the server
  // stops sending at once); the close shows as a reset, on read or send.
  const std::string trickle(1024, 'x');
  std::vector<bool> closed(peers.size(), false);
  size_t open = peers.size();
  char buf[4096];
  for (int round = 0; round < 400 && open > 0; ++round) {  // up to 20 s
    for (size_t i = 0; i < peers.size(); ++i) {
      if (closed[i]) continue;
      const int fd = peers[i]->fd();
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
      }
      const bool gone = (n < 0 && errno != EAGAIN) ||
                        (::send(fd, trickle.data(), trickle.size(), MSG_NOSIGNAL) < 0 &&
                         errno != EAGAIN);
      if (gone) {
        closed[i] = true;
        --open;
      }
    }
    if (round == 5) {
      EXPECT_EQ(Ask(Get("/healthz")), 200) << "while 1,000 refused clients linger";
      EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kRssBound);
    }
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(open, 0u) << "lingering connections outlived linger_timeout";
  EXPECT_EQ(Ask(Get("/healthz")), 200);
  EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kRssBound);
}

TEST_F(FrontDoorTest, KeepAliveAndPipeliningStillWork) {
  Peer p(port_);
  ASSERT_TRUE(p.Send(Get("/healthz") + Get("/v1/templates", kAdmin)));
  std::string a;
  for (int i = 0; i < 20 && a.find("\"items\"") == std::string::npos; ++i) a += p.ReadSome(500ms);
  EXPECT_EQ(StatusOf(a), 200);
  EXPECT_NE(a.find("\"items\""), std::string::npos) << a;
  ASSERT_TRUE(p.Send(Get("/healthz")));
  EXPECT_EQ(StatusOf(p.ReadSome(2s)), 200);
}

TEST_F(FrontDoorTest, ExpectContinueIsAnsweredAfterAuth) {
  Peer p(port_);
  std::string body = R"({"kernel":"/k"})";
  ASSERT_TRUE(p.Send("PUT /v1/templates/t HTTP/1.1\r\nAuthorization: Bearer " +
                     std::string(kAdmin) + "\r\nExpect: 100-continue\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n"));
  EXPECT_EQ(StatusOf(p.ReadSome(2s)), 100);
  ASSERT_TRUE(p.Send(body));
  EXPECT_EQ(StatusOf(p.ReadSome(2s)), 202);
  // Without a token the client learns it before sending the body.
  Peer q(port_);
  ASSERT_TRUE(q.Send("PUT /v1/templates/t HTTP/1.1\r\nExpect: 100-continue\r\n"
                     "Content-Length: 100000\r\n\r\n"));
  EXPECT_EQ(StatusOf(q.ReadSome(2s)), 401);
}

TEST_F(FrontDoorTest, SlowlorisHeaderIsClosedAtTheDeadline) {
  Peer p(port_);
  const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(100, 'a');
  auto t0 = Clock::now();
  bool closed = false;
  size_t sent = 0;
  for (char c : head) {  // one byte a second, against a 2 s header deadline
    if (sent++ == 1) {
      EXPECT_EQ(Ask(Get("/healthz")), 200) << "while a header trickles in";
    }
    if (!p.Send(std::string(1, c)) || p.ClosedWithin(1s)) {
      closed = true;
      break;
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(closed || p.ClosedWithin(3s));
  EXPECT_GE(secs, 1.5);
  EXPECT_LT(secs, 5.0);
}

TEST_F(FrontDoorTest, SlowlorisBodyIsClosedAtTheDeadline) {
  const std::string tok = NewSandbox("s");
  Peer p(port_);
  ASSERT_TRUE(p.Send("POST /v1/sandboxes/s/exec HTTP/1.1\r\nAuthorization: Bearer " + tok +
                     "\r\nContent-Length: 100\r\n\r\n{"));
  auto t0 = Clock::now();
  bool closed = false;
  for (int i = 0; i < 60 && !closed; ++i) {
    if (i == 1) {
      EXPECT_EQ(Ask(Get("/healthz")), 200) << "while a body trickles in";
    }
    closed = !p.Send(" ") || p.ClosedWithin(1s);  // a byte a second
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(closed);
  EXPECT_LT(secs, 5.0);
  // The slot it held is free again.
  EXPECT_EQ(StatusOf([&] {
              Peer q(port_);
              q.Send(Exec("s", tok));
              return q.ReadSome(2s);
            }()),
            200);
}

TEST_F(FrontDoorTest, SilentConnectionIsClosedAtTheHeaderDeadline) {
  Peer p(port_);
  auto t0 = Clock::now();
  EXPECT_TRUE(p.ClosedWithin(5s));
  EXPECT_GE(Clock::now() - t0, 1500ms);
}

// 1,000 connections with one sandbox's token, each stalled one byte into a
// declared 100-byte body: the tenant keeps its 8 slots, everyone else is
// served.
TEST_F(FrontDoorTest, StalledTenantConnectionsStarveNobody) {
  ApiServerOptions o = Options();
  o.body_timeout = 60s;  // the stalls last the whole test
  Start(o);
  const std::string tok = NewSandbox("noisy");
  const std::string other = NewSandbox("quiet");
  const size_t rss0 = RssBytes();
  std::vector<std::unique_ptr<Peer>> peers;
  const std::string stall = "POST /v1/sandboxes/noisy/exec HTTP/1.1\r\nAuthorization: Bearer " +
                            tok + "\r\nContent-Length: 100\r\n\r\n{";
  for (int i = 0; i < 1000; ++i) {
    peers.push_back(std::make_unique<Peer>(port_));
    ASSERT_TRUE(peers.back()->connected()) << i;
    peers.back()->Send(stall);
  }
  auto t0 = Clock::now();
  EXPECT_EQ(Ask(Get("/healthz")), 200);
  EXPECT_EQ(Ask(Get("/v1/sandboxes", kAdmin)), 200);
  EXPECT_EQ(Ask(Get("/v1/sandboxes/quiet", other)), 200);
  EXPECT_EQ(Ask(Exec("quiet", other)), 200);
  // The stalls last 60 s: an answer behind them would take that long.
  EXPECT_LT(Clock::now() - t0, 30s) << "the others waited behind the stalled tenant";
  // The noisy tenant itself is at its cap...
  EXPECT_EQ(Ask(Exec("noisy", tok)), 429);
  // ... and all but its 8 stalled connections were refused with 429.
  int refused = 0;
  for (auto& p : peers) refused += StatusOf(p->ReadSome(100ms)) == 429;
  EXPECT_GE(refused, 1000 - 8);
  EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kRssBound);
}

// A thousand connections that never finish a header (no token yet) do not
// lock anyone out either, and a full connection table makes room.
TEST_F(FrontDoorTest, StalledHeadersAndAFullConnectionTable) {
  ApiServerOptions o = Options();
  o.max_connections = 200;
  o.header_timeout = 60s;  // the half headers stall the whole test
  Start(o);
  std::vector<std::unique_ptr<Peer>> peers;
  for (int i = 0; i < 1000; ++i) {
    peers.push_back(std::make_unique<Peer>(port_));
    peers.back()->Send("GET /healthz HTTP/1.1\r\nX-Half: ");
  }
  auto t0 = Clock::now();
  EXPECT_EQ(Ask(Get("/healthz")), 200);
  EXPECT_EQ(Ask(Get("/v1/sandboxes", kAdmin)), 200);
  EXPECT_LT(Clock::now() - t0, 30s) << "waited for the stalled headers' 60 s deadline";
}

TEST_F(FrontDoorTest, StreamedExecToAClientThatStopsReadingIsBounded) {
  // The held-back producer is looked at while the server still waits for
  // the client: write_timeout is 10 s here, and the look takes about half a
  // second after the output stops, so only a test thread starved for
  // seconds could see the server give up first (the default 2 s could).
  ApiServerOptions opts = Options();
  opts.write_timeout = 10s;
  Start(opts);
  NewSandbox("s");
  std::atomic<size_t> produced{0};
  std::atomic<bool> done{false};
  const std::string chunk(64 << 10, 'o');
  fake_.exec_hook = [&](const std::string&, const ExecOptions& o) {
    for (size_t i = 0; i < 4096; ++i) {  // 256 MiB of output if nobody stopped it
      o.io.on_output(guest::protocol::OutputStream::kStdout,
                     guest::protocol::ByteSpan(reinterpret_cast<const uint8_t*>(chunk.data()),
                                               chunk.size()));
      produced += chunk.size();
    }
    done = true;
    guest::client::ExecResult r;
    r.exit_code = 0;
    return Result<guest::client::ExecResult>(r);
  };
  const size_t rss0 = RssBytes();
  Peer p(port_, /*rcvbuf=*/4096);
  ASSERT_TRUE(p.Send(Exec("s", kAdmin, /*stream=*/true)));
  EXPECT_EQ(StatusOf(p.ReadHead(2s)), 200);
  // The client reads no more: the producer must be held back, that is, its
  // output stops growing (unchanged over ten looks 50 ms apart) well short of
  // the 256 MiB it would write if nobody stopped it.
  size_t held = produced;
  for (int same = 0, looks = 0; same < 10 && !done && looks < 600; ++looks) {
    std::this_thread::sleep_for(50ms);
    const size_t now = produced;
    same = now == held ? same + 1 : 0;
    held = now;
  }
  EXPECT_LT(held, 32 * kMiB) << "the daemon buffered a stalled client's stream";
  EXPECT_FALSE(done);
  EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kRssBound);
  // After write_timeout without progress the server gives up on the client
  // and the exec runs to its end without it.
  for (int i = 0; i < 600 && !done; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(done);
  EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kRssBound);
}

TEST_F(FrontDoorTest, StreamedExecToASlowReaderArrivesWhole) {
  NewSandbox("s");
  const std::string chunk(16 << 10, 'z');
  fake_.exec_hook = [&](const std::string&, const ExecOptions& o) {
    for (int i = 0; i < 512; ++i) {  // 8 MiB
      o.io.on_output(guest::protocol::OutputStream::kStdout,
                     guest::protocol::ByteSpan(reinterpret_cast<const uint8_t*>(chunk.data()),
                                               chunk.size()));
    }
    guest::client::ExecResult r;
    r.exit_code = 3;
    return Result<guest::client::ExecResult>(r);
  };
  Peer p(port_);
  ASSERT_TRUE(p.Send(Exec("s", kAdmin, /*stream=*/true)));
  std::string all;
  while (all.find("\"exit\"") == std::string::npos) {
    std::string got = p.ReadSome(3s);
    if (got.empty()) break;
    all += got;
    if (all.size() < 2 * kMiB) std::this_thread::sleep_for(5ms);  // slow at first
  }
  size_t lines = 0;
  for (size_t at = all.find("\"stdout\""); at != std::string::npos;
       at = all.find("\"stdout\"", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 512u);
  EXPECT_NE(all.find(R"("exitCode":3)"), std::string::npos);
}

// GET .../files streams what the guest returns with the client's
// backpressure: a big file to a client that stops reading costs the node
// no more than a stream's queue.
TEST_F(FrontDoorTest, FileReadToAClientThatStopsReadingIsBounded) {
  NewSandbox("s");
  constexpr size_t kFile = 96 * kMiB;
  std::vector<uint8_t> big(kFile, 'f');
  ASSERT_TRUE(fake_.WriteFile("s", "/big", big, 0644).ok());
  big = {};
  const size_t rss0 = RssBytes();
  Peer p(port_, /*rcvbuf=*/4096);
  ASSERT_TRUE(p.Send(Get("/v1/sandboxes/s/files?path=/big", kAdmin)));
  std::string head = p.ReadHead(2s);
  EXPECT_EQ(StatusOf(head), 200) << head;
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  std::this_thread::sleep_for(1s);
  // The fake copies the file once to stream it; the server may add no more
  // than a stream's queue (buffering the file would be another 96 MiB).
  EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kFile + kRssBound);
  // write_timeout later the server gives up on the client, the read stops
  // and the request's slot is free (the client never reads again).
  auto metric = [&](const std::string& series) {
    std::string m;
    Ask(Get("/metrics"), 2s, &m);
    return m.find(series) != std::string::npos;
  };
  bool gave_up = false;
  for (int i = 0; i < 300 && !gave_up; ++i) {  // 30 s or more: far past 2 s under any load
    std::this_thread::sleep_for(100ms);
    gave_up = metric(R"(kubicle_http_refused_total{reason="write_timeout"} 1)") &&
              metric(R"(kubicle_http_in_flight{class="admin"} 0)");
  }
  EXPECT_TRUE(gave_up);
  EXPECT_LT(RssBytes() - std::min(RssBytes(), rss0), kFile + kRssBound);
}

TEST_F(FrontDoorTest, FileReadErrorsBeforeDataArePlainAnswers) {
  const std::string tok = NewSandbox("s");
  std::string a;
  EXPECT_EQ(Ask(Get("/v1/sandboxes/s/files?path=/none", tok), 2s, &a), 404);
  EXPECT_NE(a.find("application/json"), std::string::npos) << a;
}

TEST_F(FrontDoorTest, PerSandboxBudgetIsConfigurable) {
  ApiServerOptions o = Options();
  o.max_in_flight_per_sandbox = 2;
  Start(o);
  const std::string tok = NewSandbox("s");
  std::vector<std::unique_ptr<Peer>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<Peer>(port_));
    held.back()->Send("POST /v1/sandboxes/s/exec HTTP/1.1\r\nAuthorization: Bearer " + tok +
                      "\r\nContent-Length: 10\r\n\r\n{");
  }
  // Both are admitted (and wait for their bodies) before the third asks.
  auto admitted = [&] {
    std::string body;
    Ask(Get("/metrics"), 2s, &body);
    return body.find(R"(kubicle_http_in_flight{class="sandbox"} 2)") != std::string::npos;
  };
  for (auto end = Clock::now() + 30s; !admitted() && Clock::now() < end;) std::this_thread::sleep_for(10ms);
  std::string a;
  EXPECT_EQ(Ask(Exec("s", tok), 2s, &a), 429);
  EXPECT_NE(a.find("Retry-After: 1"), std::string::npos);
  // The admin token has its own budget.
  EXPECT_EQ(Ask(Exec("s", kAdmin)), 200);
  auto m = [&] {
    std::string body;
    Ask(Get("/metrics"), 2s, &body);
    return body;
  }();
  EXPECT_NE(m.find(R"(kubicle_http_refused_total{reason="sandbox_limit"} 1)"), std::string::npos)
      << m;
  EXPECT_NE(m.find(R"(kubicle_http_in_flight{class="sandbox"} 2)"), std::string::npos);
}

}  // namespace
}  // namespace kubicle::noderuntime::server
