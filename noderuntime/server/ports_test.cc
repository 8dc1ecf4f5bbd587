// GET /v1/sandboxes/{id}/ports/{port}: the real listener against
// FakeSandboxService, whose sandboxes' "guests" are listeners on 127.0.0.1
// (SetGuestNetwork), reached with raw sockets (and TLS) so the upgrade and
// the bytes after it are seen as a client sees them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "noderuntime/server/api_server.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "noderuntime/server/serving_cert.h"

namespace kubicle::noderuntime::server {

using testing::FakeSandboxService;
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
constexpr char kAdmin[] = "admin-secret-token";

// No test may hang: every blocking read gives up after this.
constexpr int kReadTimeoutMs = 10000;

bool WriteAllFd(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until EOF (or an error, or the read timeout).
std::string ReadToEndFd(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

void SetReadTimeout(int fd) {
  timeval tv{kReadTimeoutMs / 1000, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// The "guest": a listener on 127.0.0.1 that runs `serve` for each
// connection on a thread of its own.
class Guest {
 public:
  explicit Guest(std::function<void(int fd)> serve) : serve_(std::move(serve)) {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_.get(), 64), 0);
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      for (;;) {
        int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        accepted_++;
        SetReadTimeout(c);
        std::lock_guard l(mu_);
        conns_.emplace_back([this, c] {
          serve_(c);
          ::close(c);
        });
      }
    });
  }
  ~Guest() {
    ::shutdown(fd_.get(), SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    std::lock_guard l(mu_);
    for (auto& t : conns_) t.join();
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  std::function<void(int)> serve_;
  UniqueFd fd_;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
  std::atomic<int> accepted_{0};
};

void Echo(int fd) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    if (!WriteAllFd(fd, std::string_view(buf, static_cast<size_t>(n)))) return;
  }
  ::shutdown(fd, SHUT_WR);
}

// The client's side of a port stream, plain or TLS.
class Conn {
 public:
  virtual ~Conn() = default;
  virtual bool Write(std::string_view data) = 0;
  // >0 bytes read; 0 at the end (or a cut, or the timeout).
  virtual size_t Read(char* buf, size_t n) = 0;
  virtual void ShutdownWrite() = 0;
  std::string ReadToEnd() {
    std::string out = std::move(pending);
    pending.clear();
    char buf[65536];
    while (size_t n = Read(buf, sizeof buf)) out.append(buf, n);
    return out;
  }
  // Exactly n bytes (fewer only at the end).
  std::string ReadN(size_t n) {
    std::string out = std::move(pending);
    pending.clear();
    char buf[65536];
    while (out.size() < n) {
      size_t got = Read(buf, std::min(sizeof buf, n - out.size()));
      if (got == 0) break;
      out.append(buf, got);
    }
    return out;
  }
  std::string pending;  // bytes read past the response head
};

class PlainConn final : public Conn {
 public:
  explicit PlainConn(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    SetReadTimeout(fd_.get());
  }
  bool Write(std::string_view d) override { return WriteAllFd(fd_.get(), d); }
  size_t Read(char* buf, size_t n) override {
    ssize_t got = ::recv(fd_.get(), buf, n, 0);
    return got > 0 ? static_cast<size_t>(got) : 0;
  }
  void ShutdownWrite() override { ::shutdown(fd_.get(), SHUT_WR); }
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

class TlsConn final : public Conn {
 public:
  TlsConn(int port, const std::string& ca_pem)
      : ctx_(asio::ssl::context::tls_client), stream_(ioc_, ctx_) {
    ctx_.add_certificate_authority(asio::buffer(ca_pem));
    stream_.set_verify_mode(asio::ssl::verify_peer);
    stream_.lowest_layer().connect(
        {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    SetReadTimeout(stream_.lowest_layer().native_handle());
    stream_.handshake(asio::ssl::stream_base::client);
  }
  bool Write(std::string_view d) override {
    boost::system::error_code ec;
    asio::write(stream_, asio::buffer(d.data(), d.size()), ec);
    return !ec;
  }
  size_t Read(char* buf, size_t n) override {
    boost::system::error_code ec;
    size_t got = stream_.read_some(asio::buffer(buf, n), ec);
    return ec ? 0 : got;
  }
  void ShutdownWrite() override { ADD_FAILURE() << "no half-close over TLS in this client"; }

 private:
  asio::io_context ioc_;
  asio::ssl::context ctx_;
  asio::ssl::stream<asio::ip::tcp::socket> stream_;
};

struct Head {
  int code = 0;
  std::string text;  // the status line and fields
  std::string body;  // a refusal's body
};

// Sends the request and reads the response head; a refusal's body too.
Head Request(Conn& c, const std::string& path, const std::string& token,
             bool upgrade = true) {
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: node\r\n";
  if (upgrade) req += "Connection: Upgrade\r\nUpgrade: kubicle-tcp\r\n";
  if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
  req += "\r\n";
  Head h;
  if (!c.Write(req)) return h;
  std::string got;
  char buf[4096];
  size_t end;
  while ((end = got.find("\r\n\r\n")) == std::string::npos) {
    size_t n = c.Read(buf, sizeof buf);
    if (n == 0) return h;
    got.append(buf, n);
  }
  h.text = got.substr(0, end + 4);
  c.pending = got.substr(end + 4);
  if (h.text.rfind("HTTP/1.1 ", 0) == 0) h.code = std::atoi(h.text.c_str() + 9);
  if (h.code != 101) {
    size_t cl = h.text.find("Content-Length: ");
    size_t len = cl == std::string::npos ? 0 : std::stoul(h.text.substr(cl + 16));
    h.body = c.ReadN(len);
  }
  return h;
}

class PortsTest : public ::testing::Test {
 protected:
  PortsTest() {
    opts_.admin_token = kAdmin;
    opts_.io_threads = 2;
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  void Start(bool tls = false) {
    if (tls) {
      ca_ = *MakeCa("test CA", 24h);
      auto leaf = MakeServingCert(ca_, {"127.0.0.1"}, 24h);
      ASSERT_TRUE(leaf.ok());
      opts_.tls_cert_pem = leaf->cert_pem + ca_.cert_pem;
      opts_.tls_key_pem = leaf->key_pem;
    }
    server_ = std::make_unique<ApiServer>(&fake_, &registry_, opts_);
    Status st = Status::Unavailable("no attempt");
    for (int i = 0; i < 5 && !st.ok(); ++i) {
      port_ = *PickFreePort();
      st = server_->Start("127.0.0.1", port_);
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(fake_.PutTemplate({.name = "tg", .kernel = "/k"}).ok());
  }
  // A running sandbox with a network; its token.
  std::string Sandbox(const std::string& id, bool network = true) {
    SandboxSpec spec;
    spec.id = id;
    spec.template_name = "tg";
    auto s = fake_.CreateSandbox(spec);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (network) fake_.SetGuestNetwork(id, "127.0.0.1");
    return s.ok() ? s->token : "";
  }
  std::unique_ptr<Conn> Connect() {
    if (!opts_.tls_cert_pem.empty()) return std::make_unique<TlsConn>(port_, ca_.cert_pem);
    return std::make_unique<PlainConn>(port_);
  }
  std::string PortPath(const std::string& id, uint16_t port) {
    return "/v1/sandboxes/" + id + "/ports/" + std::to_string(port);
  }
  // The open-streams gauge as /metrics shows it (-1 when absent).
  double OpenStreams() {
    std::string text = registry_.Render();
    size_t at = text.find("\nkubicle_port_streams ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + 22));
  }
  // Polls (bounded: never a timing assertion) until the gauge reads `want`.
  bool AwaitOpenStreams(double want) {
    for (int i = 0; i < 1000; ++i) {
      if (OpenStreams() == want) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  ApiServerOptions opts_;
  FakeSandboxService fake_;
  metrics::Registry registry_;
  std::unique_ptr<ApiServer> server_;
  int port_ = 0;
  CertAndKey ca_;
};

TEST_F(PortsTest, UpgradesWithTheSandboxTokenAndCarriesBytesBothWays) {
  Start();
  Guest guest(Echo);
  std::string token = Sandbox("s1");
  auto c = Connect();
  Head h = Request(*c, PortPath("s1", guest.port()), token);
  ASSERT_EQ(h.code, 101) << h.text << h.body;
  EXPECT_NE(h.text.find("Upgrade: kubicle-tcp"), std::string::npos) << h.text;
  EXPECT_NE(h.text.find("Connection: Upgrade"), std::string::npos) << h.text;
  EXPECT_TRUE(AwaitOpenStreams(1));
  ASSERT_TRUE(c->Write("hello guest"));
  EXPECT_EQ(c->ReadN(11), "hello guest");
  ASSERT_TRUE(c->Write("again"));
  EXPECT_EQ(c->ReadN(5), "again");
  c.reset();
  EXPECT_TRUE(AwaitOpenStreams(0)) << "a closed stream gives its slot back";
  EXPECT_EQ(guest.accepted(), 1);
}

TEST_F(PortsTest, TheAdminTokenMayOpenOne) {
  Start();
  Guest guest(Echo);
  Sandbox("s1");
  auto c = Connect();
  ASSERT_EQ(Request(*c, PortPath("s1", guest.port()), kAdmin).code, 101);
  ASSERT_TRUE(c->Write("x"));
  EXPECT_EQ(c->ReadN(1), "x");
}

TEST_F(PortsTest, BytesSentWithTheRequestReachTheGuestFirst) {
  Start();
  Guest guest(Echo);
  std::string token = Sandbox("s1");
  PlainConn c(port_);
  std::string req = "GET " + PortPath("s1", guest.port()) +
                    " HTTP/1.1\r\nHost: n\r\nConnection: Upgrade\r\nUpgrade: kubicle-tcp\r\n"
                    "Authorization: Bearer " + token + "\r\n\r\nearly bytes";
  ASSERT_TRUE(c.Write(req));
  std::string all;
  char buf[4096];
  while (all.find("\r\n\r\n") == std::string::npos) {
    size_t n = c.Read(buf, sizeof buf);
    ASSERT_GT(n, 0u) << all;
    all.append(buf, n);
  }
  EXPECT_EQ(all.rfind("HTTP/1.1 101", 0), 0u) << all;
  c.pending = all.substr(all.find("\r\n\r\n") + 4);
  EXPECT_EQ(c.ReadN(11), "early bytes");
}

TEST_F(PortsTest, NoTokenOrAnotherSandboxsTokenIs401) {
  Start();
  Guest guest(Echo);
  Sandbox("s1");
  std::string other = Sandbox("s2");
  auto c1 = Connect();
  Head none = Request(*c1, PortPath("s1", guest.port()), "");
  EXPECT_EQ(none.code, 401) << none.text;
  auto c2 = Connect();
  Head theirs = Request(*c2, PortPath("s1", guest.port()), other);
  EXPECT_EQ(theirs.code, 401) << theirs.text;
  EXPECT_EQ(guest.accepted(), 0) << "a refused request never reaches the guest";
}

TEST_F(PortsTest, BadPortsAre400AndAMissingUpgradeIs426) {
  Start();
  std::string token = Sandbox("s1");
  for (const char* bad : {"0", "65536", "03000", "abc", "-1", "80%2080"}) {
    auto c = Connect();
    Head h = Request(*c, std::string("/v1/sandboxes/s1/ports/") + bad, token);
    EXPECT_EQ(h.code, 400) << bad << ": " << h.text;
    EXPECT_NE(h.body.find("1 to 65535"), std::string::npos) << h.body;
  }
  auto c = Connect();
  Head h = Request(*c, PortPath("s1", 3000), token, /*upgrade=*/false);
  EXPECT_EQ(h.code, 426) << h.text;
  EXPECT_NE(h.text.find("Upgrade: kubicle-tcp"), std::string::npos) << h.text;
  auto post = Connect();
  ASSERT_TRUE(post->Write("POST " + PortPath("s1", 3000) +
                          " HTTP/1.1\r\nHost: n\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_EQ(post->ReadN(12), "HTTP/1.1 405");
}

TEST_F(PortsTest, ASandboxWithoutANetworkIs409AndAnUnknownOne404) {
  Start();
  std::string token = Sandbox("s1", /*network=*/false);
  auto c = Connect();
  Head h = Request(*c, PortPath("s1", 3000), token);
  EXPECT_EQ(h.code, 409) << h.text;
  EXPECT_NE(h.body.find("has no network"), std::string::npos) << h.body;
  auto c2 = Connect();
  EXPECT_EQ(Request(*c2, PortPath("nope", 3000), kAdmin).code, 404);
}

TEST_F(PortsTest, ARefusedConnectIs502WithTheReason) {
  Start();
  std::string token = Sandbox("s1");
  uint16_t closed_port;
  {
    Guest gone([](int) {});
    closed_port = gone.port();
  }  // nothing listens there any more
  auto c = Connect();
  Head h = Request(*c, PortPath("s1", closed_port), token);
  EXPECT_EQ(h.code, 502) << h.text;
  EXPECT_NE(h.body.find("BadGateway"), std::string::npos) << h.body;
  EXPECT_NE(h.body.find("refused"), std::string::npos) << h.body;
  EXPECT_TRUE(AwaitOpenStreams(0));
}

TEST_F(PortsTest, ATokensStreamBudgetIs429AndComesBack) {
  opts_.max_port_streams_per_token = 2;
  Start();
  Guest guest(Echo);
  std::string token = Sandbox("s1");
  std::vector<std::unique_ptr<Conn>> open;
  for (int i = 0; i < 2; ++i) {
    open.push_back(Connect());
    ASSERT_EQ(Request(*open.back(), PortPath("s1", guest.port()), token).code, 101);
  }
  auto third = Connect();
  Head h = Request(*third, PortPath("s1", guest.port()), token);
  EXPECT_EQ(h.code, 429) << h.text;
  EXPECT_NE(h.text.find("Retry-After"), std::string::npos);
  // Another token has a budget of its own.
  auto admin = Connect();
  EXPECT_EQ(Request(*admin, PortPath("s1", guest.port()), kAdmin).code, 101);
  // The open streams still work, and a closed one's slot comes back.
  ASSERT_TRUE(open[0]->Write("ok"));
  EXPECT_EQ(open[0]->ReadN(2), "ok");
  open.pop_back();
  ASSERT_TRUE(AwaitOpenStreams(2));
  auto again = Connect();
  EXPECT_EQ(Request(*again, PortPath("s1", guest.port()), token).code, 101);
}

TEST_F(PortsTest, AllStreamsTogetherAreBudgetedToo) {
  opts_.max_port_streams = 1;
  Start();
  Guest guest(Echo);
  std::string token = Sandbox("s1");
  auto first = Connect();
  ASSERT_EQ(Request(*first, PortPath("s1", guest.port()), token).code, 101);
  auto second = Connect();
  EXPECT_EQ(Request(*second, PortPath("s1", guest.port()), kAdmin).code, 503);
}

TEST_F(PortsTest, AnIdleStreamIsClosedBothWays) {
  opts_.port_idle_timeout = 200ms;
  Start();
  std::atomic<bool> guest_saw_end{false};
  Guest guest([&](int fd) {
    char b[16];
    guest_saw_end = ::recv(fd, b, sizeof b, 0) == 0;  // nothing comes: the end
  });
  std::string token = Sandbox("s1");
  auto c = Connect();
  ASSERT_EQ(Request(*c, PortPath("s1", guest.port()), token).code, 101);
  // The read returns at the close (well before its own 10 s timeout in a
  // healthy run; a timing-independent check of what arrives).
  EXPECT_EQ(c->ReadToEnd(), "");
  EXPECT_TRUE(AwaitOpenStreams(0));
  for (int i = 0; i < 1000 && !guest_saw_end; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(guest_saw_end);
  EXPECT_NE(registry_.Render().find("reason=\"stream_idle_timeout\""), std::string::npos);
}

TEST_F(PortsTest, TrafficKeepsAStreamAlive) {
  // Roomy enough that a loaded machine's stall between rounds stays under it.
  opts_.port_idle_timeout = 2s;
  Start();
  Guest guest(Echo);
  std::string token = Sandbox("s1");
  auto c = Connect();
  ASSERT_EQ(Request(*c, PortPath("s1", guest.port()), token).code, 101);
  // Longer in total than the idle timeout, never idle for it.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(c->Write("tick"));
    ASSERT_EQ(c->ReadN(4), "tick") << "round " << i;
    std::this_thread::sleep_for(300ms);
  }
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& ch : s) ch = static_cast<char>(rng());
  return s;
}

TEST_F(PortsTest, ALargeTransferBothWaysArrivesWhole) {
  Start();
  Guest guest(Echo);
  std::string token = Sandbox("s1");
  PlainConn c(port_);
  ASSERT_EQ(Request(c, PortPath("s1", guest.port()), token).code, 101);
  const std::string data = RandomBytes(24 << 20, 7);
  // Written and read at once: the echo cannot hold 24 MiB, so a relay
  // that did not move both ways together would stall here.
  std::thread writer([&] {
    EXPECT_TRUE(c.Write(data));
    c.ShutdownWrite();
  });
  std::string back = c.ReadToEnd();
  writer.join();
  EXPECT_EQ(back.size(), data.size());
  EXPECT_TRUE(back == data) << "the echo differs";
}

TEST_F(PortsTest, AClientHalfCloseReachesTheGuestAndItsAnswerStillComes) {
  Start();
  Guest guest([](int fd) {
    std::string got = ReadToEndFd(fd);  // until the client's end
    WriteAllFd(fd, "got " + std::to_string(got.size()) + " bytes: " + got);
  });
  std::string token = Sandbox("s1");
  auto c = Connect();
  ASSERT_EQ(Request(*c, PortPath("s1", guest.port()), token).code, 101);
  ASSERT_TRUE(c->Write("hello"));
  c->ShutdownWrite();
  EXPECT_EQ(c->ReadToEnd(), "got 5 bytes: hello");
  EXPECT_TRUE(AwaitOpenStreams(0));
}

TEST_F(PortsTest, TlsStreamsCarryBytesBothWaysAndTheGuestsEnd) {
  Start(/*tls=*/true);
  Guest guest([](int fd) {
    char b[64];
    ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n > 0) WriteAllFd(fd, "echo:" + std::string(b, static_cast<size_t>(n)));
    // Then a large answer and the end.
    WriteAllFd(fd, RandomBytes(3 << 20, 9));
  });
  std::string token = Sandbox("s1");
  auto c = Connect();
  Head h = Request(*c, PortPath("s1", guest.port()), token);
  ASSERT_EQ(h.code, 101) << h.text;
  ASSERT_TRUE(c->Write("over tls"));
  EXPECT_EQ(c->ReadN(13), "echo:over tls");
  std::string rest = c->ReadToEnd();
  EXPECT_EQ(rest.size(), size_t{3} << 20);
  EXPECT_TRUE(rest == RandomBytes(3 << 20, 9));
  EXPECT_TRUE(AwaitOpenStreams(0));
}

TEST_F(PortsTest, StopEndsOpenStreams) {
  Start();
  Guest guest(Echo);
  std::string token = Sandbox("s1");
  auto c = Connect();
  ASSERT_EQ(Request(*c, PortPath("s1", guest.port()), token).code, 101);
  server_->Stop();
  EXPECT_EQ(c->ReadToEnd(), "");
  server_.reset();
}

}  // namespace
}  // namespace kubicle::noderuntime::server
