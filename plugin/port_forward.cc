#include "plugin/port_forward.h"

#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "noderuntime/api/http_relay.h"
#include "noderuntime/api/routes.h"

namespace kubicle::plugin {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using TlsStream = asio::ssl::stream<tcp::socket>;
using error_code = boost::system::error_code;

namespace {

constexpr size_t kMaxHead = 16 << 10;
constexpr size_t kMaxErrorBody = 64 << 10;
// The node closes an idle stream (15 min); this side never does first.
constexpr std::chrono::hours kClientIdle{24};

std::optional<uint16_t> Port(const std::string& s) { return noderuntime::api::ParsePort(s); }

struct Endpoint {
  bool tls = false;
  std::string host;  // no brackets
  std::string port;
  std::string authority;  // for the Host field
};

Result<Endpoint> EndpointOf(const std::string& url) {
  Endpoint e;
  std::string rest;
  if (url.rfind("https://", 0) == 0) {
    e.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return Status::InvalidArgument("the data plane URL \"" + url + "\" is not http(s)://");
  }
  e.authority = rest;
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || rest.back() == ']') {
    e.host = rest;
    e.port = e.tls ? "443" : "80";
  } else {
    e.host = rest.substr(0, colon);
    e.port = rest.substr(colon + 1);
  }
  if (e.host.size() > 2 && e.host.front() == '[') e.host = e.host.substr(1, e.host.size() - 2);
  return e;
}

// "HTTP/1.1 101 ..." -> 101; 0 when not a status line.
int StatusOf(const std::string& head) {
  if (head.rfind("HTTP/1.", 0) != 0 || head.size() < 12 || head[8] != ' ') return 0;
  int code = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (head[i] < '0' || head[i] > '9') return 0;
    code = code * 10 + (head[i] - '0');
  }
  return code;
}

size_t ContentLength(const std::string& head) {
  std::string lower = head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t at = lower.find("\r\ncontent-length:");
  if (at == std::string::npos) return 0;
  size_t v = at + 17, n = 0;
  while (v < lower.size() && lower[v] == ' ') ++v;
  while (v < lower.size() && lower[v] >= '0' && lower[v] <= '9' && n <= kMaxErrorBody) {
    n = n * 10 + static_cast<size_t>(lower[v++] - '0');
  }
  return std::min(n, kMaxErrorBody);
}

// The upgrade on a connected stream: Ok with the bytes past the head, or
// the node's refusal as a Status naming its code and message.
template <class Stream>
Result<std::string> Upgrade(Stream& s, const Endpoint& ep, const std::string& path,
                            const std::string& token) {
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + ep.authority +
                          "\r\nConnection: Upgrade\r\nUpgrade: " +
                          noderuntime::api::kPortUpgrade + "\r\nAuthorization: Bearer " + token +
                          "\r\n\r\n";
  error_code ec;
  asio::write(s, asio::buffer(req), ec);
  if (ec) return Status::Unavailable("sending the upgrade: " + ec.message());
  asio::streambuf buf(kMaxHead);
  size_t head_len = asio::read_until(s, buf, "\r\n\r\n", ec);
  if (ec) return Status::Unavailable("reading the node's answer: " + ec.message());
  std::string all(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
  std::string head = all.substr(0, head_len);
  std::string rest = all.substr(head_len);
  const int code = StatusOf(head);
  if (code == 101) return rest;
  const size_t want = ContentLength(head);
  if (rest.size() < want) {
    std::string more(want - rest.size(), '\0');
    size_t n = asio::read(s, asio::buffer(more), ec);
    rest += more.substr(0, n);
  }
  rest.resize(std::min(rest.size(), want));
  return Status::Unavailable("the node answered " + std::to_string(code) + ": " + rest);
}

}  // namespace

Result<PortPair> ParsePortPair(const std::string& text) {
  auto bad = [&] {
    return Status::InvalidArgument("\"" + text +
                                   "\" is not LOCAL:REMOTE, PORT or :REMOTE (ports 1..65535)");
  };
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    auto p = Port(text);
    if (!p) return bad();
    return PortPair{*p, *p};
  }
  auto remote = Port(text.substr(colon + 1));
  if (!remote) return bad();
  if (colon == 0) return PortPair{0, *remote};
  auto local = Port(text.substr(0, colon));
  if (!local) return bad();
  return PortPair{*local, *remote};
}

class PortForward::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(DataPlane dp, uint16_t remote, OnError on_error)
      : dp_(std::move(dp)),
        remote_(remote),
        on_error_(std::move(on_error)),
        ssl_(asio::ssl::context::tls_client),
        acceptor_(ioc_) {}

  Status Listen(const std::string& address, uint16_t port);
  void Run() {
    work_.emplace(ioc_.get_executor());
    Accept();
    io_ = std::thread([this] { ioc_.run(); });
  }
  void Stop();
  uint16_t local_port() const { return local_port_; }

 private:
  void Accept();
  void Serve(std::shared_ptr<tcp::socket> local);
  template <class Stream>
  void Relay(std::shared_ptr<tcp::socket> local, std::shared_ptr<Stream> node, std::string first);
  Status Open(tcp::socket& sock);
  void Error(const std::string& m) {
    if (on_error_) on_error_(m);
  }

  DataPlane dp_;
  Endpoint ep_;
  uint16_t remote_;
  OnError on_error_;
  asio::io_context ioc_;
  asio::ssl::context ssl_;
  tcp::acceptor acceptor_;
  uint16_t local_port_ = 0;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread io_;
  std::mutex mu_;
  bool stopping_ = false;
  std::list<std::thread> openers_;
  std::vector<std::weak_ptr<tcp::socket>> sockets_;  // to close on Stop
};

Status PortForward::Impl::Listen(const std::string& address, uint16_t port) {
  ASSIGN_OR_RETURN(ep_, EndpointOf(dp_.url));
  if (ep_.tls) {
    error_code ec;
    ssl_.add_certificate_authority(asio::buffer(dp_.ca_pem), ec);
    if (ec) return Status::InvalidArgument("the node's CA does not load: " + ec.message());
    ssl_.set_verify_mode(asio::ssl::verify_peer);
    ssl_.set_verify_callback(asio::ssl::host_name_verification(ep_.host));
  }
  error_code ec;
  auto addr = asio::ip::make_address(address, ec);
  if (ec) return Status::InvalidArgument("--address " + address + ": " + ec.message());
  tcp::endpoint local(addr, port);
  acceptor_.open(local.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(local, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable("listening on " + address + ":" + std::to_string(port) + ": " +
                               ec.message());
  }
  local_port_ = acceptor_.local_endpoint().port();
  return Status::Ok();
}

void PortForward::Impl::Accept() {
  acceptor_.async_accept([self = shared_from_this()](error_code ec, tcp::socket s) {
    if (ec) return;  // closed by Stop
    auto local = std::make_shared<tcp::socket>(std::move(s));
    std::lock_guard l(self->mu_);
    if (self->stopping_) return;
    std::erase_if(self->sockets_, [](const auto& w) { return w.expired(); });
    self->sockets_.push_back(local);
    self->openers_.emplace_back([self, local] { self->Serve(local); });
    self->Accept();
  });
}

Status PortForward::Impl::Open(tcp::socket& sock) {
  error_code ec;
  tcp::resolver resolver(ioc_);
  auto found = resolver.resolve(ep_.host, ep_.port, ec);
  if (!ec) asio::connect(sock, found, ec);
  if (ec) {
    return Status::Unavailable("cannot reach the node at " + ep_.authority + ": " + ec.message());
  }
  sock.set_option(tcp::no_delay(true), ec);
  return Status::Ok();
}

// On an opener thread: connect, handshake, upgrade (all blocking), then
// hand both sockets to the I/O thread.
void PortForward::Impl::Serve(std::shared_ptr<tcp::socket> local) {
  const std::string path = dp_.Path("/ports/" + std::to_string(remote_));
  auto fail = [&](const Status& st) {
    Error(st.message());
    error_code ignored;
    local->close(ignored);
  };
  if (!ep_.tls) {
    auto node = std::make_shared<tcp::socket>(ioc_);
    {
      std::lock_guard l(mu_);
      sockets_.push_back(node);
    }
    if (Status st = Open(*node); !st.ok()) return fail(st);
    auto first = Upgrade(*node, ep_, path, dp_.token);
    if (!first.ok()) return fail(first.status());
    return Relay(local, node, std::move(*first));
  }
  auto node = std::make_shared<TlsStream>(ioc_, ssl_);
  {
    std::lock_guard l(mu_);
    sockets_.push_back(std::shared_ptr<tcp::socket>(node, &node->next_layer()));
  }
  if (Status st = Open(node->next_layer()); !st.ok()) return fail(st);
  // SNI only for names: a literal address is not a server name.
  error_code ec;
  asio::ip::make_address(ep_.host, ec);
  if (ec) SSL_set_tlsext_host_name(node->native_handle(), ep_.host.c_str());
  node->handshake(asio::ssl::stream_base::client, ec);
  if (ec) {
    return fail(
        Status::Unavailable("TLS with the node at " + ep_.authority + ": " + ec.message()));
  }
  auto first = Upgrade(*node, ep_, path, dp_.token);
  if (!first.ok()) return fail(first.status());
  Relay(local, node, std::move(*first));
}

template <class Stream>
void PortForward::Impl::Relay(std::shared_ptr<tcp::socket> local, std::shared_ptr<Stream> node,
                              std::string first) {
  // One I/O thread: every handler of both sockets runs on it, a strand.
  asio::post(ioc_, [self = shared_from_this(), local, node, first = std::move(first)]() mutable {
    auto owner = std::make_shared<std::pair<std::shared_ptr<tcp::socket>, std::shared_ptr<Stream>>>(
        local, node);
    noderuntime::api::Relay<Stream, tcp::socket>::Start(
        *node, *local, std::move(first), {64 << 10, kClientIdle}, owner,
        [local, node](const char*) {
          error_code ignored;
          local->close(ignored);
          if constexpr (std::is_same_v<Stream, TlsStream>) {
            node->next_layer().close(ignored);
          } else {
            node->close(ignored);
          }
        });
  });
}

void PortForward::Impl::Stop() {
  std::list<std::thread> openers;
  std::vector<std::weak_ptr<tcp::socket>> sockets;
  {
    std::lock_guard l(mu_);
    if (stopping_) return;
    stopping_ = true;
    sockets.swap(sockets_);
  }
  asio::post(ioc_, [self = shared_from_this()] {
    error_code ignored;
    self->acceptor_.close(ignored);
  });
  // Shutting a socket down wakes whatever waits on it, on any thread: an
  // opener blocked on the node, a relay's reads.
  for (auto& w : sockets) {
    if (auto s = w.lock()) {
      error_code ignored;
      s->shutdown(tcp::socket::shutdown_both, ignored);
    }
  }
  {
    std::lock_guard l(mu_);
    openers.swap(openers_);
  }
  for (auto& t : openers) t.join();
  work_.reset();
  ioc_.stop();
  if (io_.joinable()) io_.join();
  // The I/O thread is gone, perhaps before it ran the close posted above:
  // close the listener here, then run what is left (the aborted accept,
  // the relays' failed reads), so no handler keeps this Impl alive.
  error_code ignored;
  acceptor_.close(ignored);
  ioc_.restart();
  for (int round = 0; round < 100 && ioc_.poll() > 0; ++round) {
  }
}

Result<std::unique_ptr<PortForward>> PortForward::Start(DataPlane dp, uint16_t remote_port,
                                                        const std::string& address,
                                                        uint16_t local_port, OnError on_error) {
  auto impl = std::make_shared<Impl>(std::move(dp), remote_port, std::move(on_error));
  RETURN_IF_ERROR(impl->Listen(address, local_port));
  impl->Run();
  return std::unique_ptr<PortForward>(new PortForward(std::move(impl)));
}

PortForward::~PortForward() { impl_->Stop(); }

uint16_t PortForward::local_port() const { return impl_->local_port(); }

}  // namespace kubicle::plugin
