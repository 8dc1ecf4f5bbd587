// kubicle-bench-ports: what a guest port stream (docs/api.md, "Ports")
// costs against a direct TCP connection. An in-process ApiServer over
// FakeSandboxService (plain, and TLS with its own CA) relays to a "guest"
// on 127.0.0.1, so the figures are the relay's and the front door's, not
// a VM's network. Prints, for each of direct loopback, the plain relay and
// the TLS relay: the round trip of 64 bytes (p50/p99, one connection, one
// byte string at a time) and the throughput each way (guest -> client,
// client -> guest). Prints figures; never asserts on timing.
//
//   kubicle-bench-ports [--samples 20000] [--mib 256] [--runs 3]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "bench/stats.h"
#include "common/flag_args.h"
#include "common/unique_fd.h"
#include "noderuntime/server/api_server.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "noderuntime/server/serving_cert.h"

namespace kubicle::bench {
namespace {

namespace server = noderuntime::server;
namespace asio = boost::asio;
using namespace std::chrono_literals;

struct Options {
  int samples = 20000;
  int mib = 256;
  int runs = 3;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "kubicle-bench-ports: %s\n", what.c_str());
  std::exit(1);
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

// The guest: the first byte of a connection says what it does.
//   'e' echo until the end; 's' + 8-byte N: sends N bytes; 'k' + 8-byte N:
//   reads N bytes, then answers one byte.
class Guest {
 public:
  Guest() {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_.get(), 64) != 0 ||
        ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      Die("guest listener");
    }
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        std::thread([c] { Serve(c); ::close(c); }).detach();
      }
    });
  }
  ~Guest() {
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port = 0;

 private:
  static void Serve(int c) {
    char mode;
    if (!ReadAll(c, &mode, 1)) return;
    std::vector<char> buf(1 << 20);
    if (mode == 'e') {
      for (;;) {
        ssize_t n = ::recv(c, buf.data(), buf.size(), 0);
        if (n <= 0 || !WriteAll(c, buf.data(), size_t(n))) return;
      }
    }
    uint64_t n = 0;
    if (!ReadAll(c, reinterpret_cast<char*>(&n), sizeof n)) return;
    if (mode == 's') {
      while (n > 0) {
        size_t chunk = std::min<uint64_t>(n, buf.size());
        if (!WriteAll(c, buf.data(), chunk)) return;
        n -= chunk;
      }
      // Wait for the client's end, so the guest's close never races the
      // last bytes through the relay.
      ::recv(c, buf.data(), 1, 0);
      return;
    }
    while (n > 0) {
      ssize_t r = ::recv(c, buf.data(), std::min<uint64_t>(n, buf.size()), 0);
      if (r <= 0) return;
      n -= uint64_t(r);
    }
    WriteAll(c, "k", 1);
    ::recv(c, buf.data(), 1, 0);
  }
  UniqueFd fd_;
  std::thread thread_;
};

// A client's side: plain fd, or TLS through Asio (one thread at a time).
class Conn {
 public:
  virtual ~Conn() = default;
  virtual bool Write(const char* p, size_t n) = 0;
  virtual size_t ReadSome(char* p, size_t n) = 0;  // 0: end or error
  bool Read(char* p, size_t n) {
    while (n > 0) {
      size_t got = ReadSome(p, n);
      if (got == 0) return false;
      p += got;
      n -= got;
    }
    return true;
  }
};

class PlainConn final : public Conn {
 public:
  explicit PlainConn(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) Die("connect");
    int one = 1;
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  bool Write(const char* p, size_t n) override { return WriteAll(fd_.get(), p, n); }
  size_t ReadSome(char* p, size_t n) override {
    ssize_t r = ::recv(fd_.get(), p, n, 0);
    return r > 0 ? size_t(r) : 0;
  }

 private:
  UniqueFd fd_;
};

class TlsConn final : public Conn {
 public:
  TlsConn(uint16_t port, const std::string& ca_pem)
      : ctx_(asio::ssl::context::tls_client), s_(ioc_, ctx_) {
    ctx_.add_certificate_authority(asio::buffer(ca_pem));
    s_.set_verify_mode(asio::ssl::verify_peer);
    s_.lowest_layer().connect({asio::ip::make_address("127.0.0.1"), port});
    s_.lowest_layer().set_option(asio::ip::tcp::no_delay(true));
    s_.handshake(asio::ssl::stream_base::client);
  }
  bool Write(const char* p, size_t n) override {
    boost::system::error_code ec;
    asio::write(s_, asio::buffer(p, n), ec);
    return !ec;
  }
  size_t ReadSome(char* p, size_t n) override {
    boost::system::error_code ec;
    size_t got = s_.read_some(asio::buffer(p, n), ec);
    return ec ? 0 : got;
  }

 private:
  asio::io_context ioc_;
  asio::ssl::context ctx_;
  asio::ssl::stream<asio::ip::tcp::socket> s_;
};

// How a path makes a connection to the guest: direct, or through a node.
struct Path {
  std::string name;
  std::function<std::unique_ptr<Conn>()> open;
};

// The upgrade on a fresh connection; dies unless it is a 101.
std::unique_ptr<Conn> Upgraded(std::unique_ptr<Conn> c, const std::string& path,
                               const std::string& token) {
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: node\r\nConnection: Upgrade\r\n"
                    "Upgrade: kubicle-tcp\r\nAuthorization: Bearer " + token + "\r\n\r\n";
  if (!c->Write(req.data(), req.size())) Die("sending the upgrade");
  std::string head;
  char ch;
  while (head.size() < 16384 && head.find("\r\n\r\n") == std::string::npos) {
    if (!c->Read(&ch, 1)) Die("reading the answer");
    head += ch;
  }
  if (head.rfind("HTTP/1.1 101", 0) != 0) Die("no 101: " + head);
  return c;
}

void RoundTrips(const Path& p, const Options& o) {
  auto c = p.open();
  c->Write("e", 1);
  char out[64], in[64];
  std::memset(out, 'x', sizeof out);
  std::vector<double> us;
  us.reserve(size_t(o.samples));
  for (int i = 0; i < o.samples + 1000; ++i) {  // the first 1,000 warm up
    auto t0 = Clock::now();
    if (!c->Write(out, sizeof out) || !c->Read(in, sizeof in)) Die(p.name + ": echo");
    if (i >= 1000) us.push_back(MillisSince(t0) * 1000);
  }
  PrintPercentiles(p.name + ": round trip of 64 B", us, "us");
}

void Throughput(const Path& p, const Options& o) {
  const uint64_t bytes = uint64_t(o.mib) << 20;
  std::vector<char> buf(1 << 20);
  std::vector<double> down, up;
  for (int run = 0; run < o.runs; ++run) {
    {
      auto c = p.open();
      char hdr[9] = {'s'};
      std::memcpy(hdr + 1, &bytes, 8);
      c->Write(hdr, sizeof hdr);
      auto t0 = Clock::now();
      uint64_t left = bytes;
      while (left > 0) {
        size_t n = c->ReadSome(buf.data(), std::min<uint64_t>(left, buf.size()));
        if (n == 0) Die(p.name + ": the download ended early");
        left -= n;
      }
      down.push_back(double(bytes) / (MillisSince(t0) / 1000) / double(1 << 30));
    }
    {
      auto c = p.open();
      char hdr[9] = {'k'};
      std::memcpy(hdr + 1, &bytes, 8);
      c->Write(hdr, sizeof hdr);
      auto t0 = Clock::now();
      for (uint64_t left = bytes; left > 0;) {
        size_t chunk = std::min<uint64_t>(left, buf.size());
        if (!c->Write(buf.data(), chunk)) Die(p.name + ": the upload failed");
        left -= chunk;
      }
      char ack;
      if (!c->Read(&ack, 1)) Die(p.name + ": no acknowledgement");
      up.push_back(double(bytes) / (MillisSince(t0) / 1000) / double(1 << 30));
    }
  }
  std::printf("%-44s guest->client %6.2f GiB/s  client->guest %6.2f GiB/s  (best of %d x %d MiB; "
              "median %.2f / %.2f)\n",
              (p.name + ": throughput").c_str(), *std::max_element(down.begin(), down.end()),
              *std::max_element(up.begin(), up.end()), o.runs, o.mib, Percentile(down, 50),
              Percentile(up, 50));
}

// A node API over the fake, plain or TLS; its sandbox's guest is `guest`.
struct Node {
  server::testing::FakeSandboxService fake;
  metrics::Registry registry;
  std::unique_ptr<server::ApiServer> server;
  int port = 0;
  std::string token, ca_pem;

  Node(bool tls) {
    server::ApiServerOptions o;
    o.admin_token = "admin";
    if (tls) {
      auto ca = server::MakeCa("bench CA", 24h);
      auto leaf = server::MakeServingCert(*ca, {"127.0.0.1"}, 24h);
      if (!ca.ok() || !leaf.ok()) Die("certificates");
      o.tls_cert_pem = leaf->cert_pem + ca->cert_pem;
      o.tls_key_pem = leaf->key_pem;
      ca_pem = ca->cert_pem;
    }
    server = std::make_unique<server::ApiServer>(&fake, &registry, o);
    Status st = Status::Unavailable("no attempt");
    for (int i = 0; i < 5 && !st.ok(); ++i) {
      port = *server::PickFreePort();
      st = server->Start("127.0.0.1", port);
    }
    if (!st.ok()) Die("node: " + st.ToString());
    if (!fake.PutTemplate({.name = "tg", .kernel = "/k"}).ok()) Die("template");
    noderuntime::SandboxSpec spec;
    spec.id = "s1";
    spec.template_name = "tg";
    auto sb = fake.CreateSandbox(spec);
    if (!sb.ok()) Die("sandbox");
    token = sb->token;
    fake.SetGuestNetwork("s1", "127.0.0.1");
  }
  ~Node() { server->Stop(); }
};

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) {
  using namespace kubicle;
  using namespace kubicle::bench;
  Options o;
  const std::vector<std::string> args =
      SplitFlagValues(std::vector<std::string>(argv + 1, argv + argc));
  for (size_t i = 0; i < args.size(); i += 2) {
    const std::string flag = i + 1 < args.size() ? args[i] : "";
    const int v = flag.empty() ? 0 : std::atoi(args[i + 1].c_str());
    if (flag == "--samples") {
      o.samples = std::max(1, v);
    } else if (flag == "--mib") {
      o.mib = std::max(1, v);
    } else if (flag == "--runs") {
      o.runs = std::max(1, v);
    } else {
      std::fprintf(stderr, "usage: kubicle-bench-ports [--samples N] [--mib N] [--runs N]\n");
      return 2;
    }
  }
  Guest guest;
  Node plain(false), tls(true);
  const std::string path = "/v1/sandboxes/s1/ports/" + std::to_string(guest.port);
  std::vector<Path> paths = {
      {"direct loopback", [&] { return std::unique_ptr<Conn>(new PlainConn(guest.port)); }},
      {"plain relay",
       [&] {
         return Upgraded(std::make_unique<PlainConn>(uint16_t(plain.port)), path, plain.token);
       }},
      {"TLS relay",
       [&] {
         return Upgraded(std::make_unique<TlsConn>(uint16_t(tls.port), tls.ca_pem), path,
                         tls.token);
       }},
  };
  std::printf("kubicle-bench-ports: %d round trips, %d x %d MiB each way, %u cores\n", o.samples,
              o.runs, o.mib, std::thread::hardware_concurrency());
  for (const Path& p : paths) RoundTrips(p, o);
  for (const Path& p : paths) Throughput(p, o);
  return 0;
}
