#include "noderuntime/server/http_server.h"

#include <sys/resource.h>

#include <algorithm>

#include "common/log.h"
#include "noderuntime/server/http_server_internal.h"

namespace kubicle::noderuntime::server {

void HttpServer::Core::Register(ConnBase* c, std::weak_ptr<ConnBase> w) {
  std::lock_guard l(mu_);
  conns_[c] = std::move(w);
}

void HttpServer::Core::Unregister(ConnBase* c) {
  std::lock_guard l(mu_);
  conns_.erase(c);
}

size_t HttpServer::Core::connections() const {
  std::lock_guard l(mu_);
  return conns_.size();
}

namespace {

Result<std::unique_ptr<net::ssl::context>> MakeServerContext(const HttpTls& tls) {
  auto ctx = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                       net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                       net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use,
                   ec);
  if (!ec) SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  // OpenSSL frees a connection's record buffers while it is idle: a
  // thousand stalled TLS connections then cost far less.
  SSL_CTX_set_mode(ctx->native_handle(), SSL_MODE_RELEASE_BUFFERS);
  if (!ec) ctx->use_certificate_chain(net::buffer(tls.cert_chain_pem), ec);
  if (ec) return Status::InvalidArgument("the TLS certificate does not load: " + ec.message());
  ctx->use_private_key(net::buffer(tls.key_pem), net::ssl::context::pem, ec);
  if (ec) return Status::InvalidArgument("the TLS private key does not load: " + ec.message());
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::InvalidArgument("the TLS private key does not match the certificate");
  }
  return ctx;
}

}  // namespace

Status HttpServer::Core::Listen(const std::string& host, int port) {
  if (tls_pem) {
    ASSIGN_OR_RETURN(ssl, MakeServerContext(*tls_pem));
  }
  boost::system::error_code ec;
  tcp::endpoint ep;
  auto addr = net::ip::make_address(host, ec);
  if (!ec) {
    ep = tcp::endpoint(addr, static_cast<unsigned short>(port));
  } else {
    // A host name ("localhost"): its first address.
    tcp::resolver resolver(ioc);
    auto found = resolver.resolve(host, std::to_string(port), ec);
    if (ec || found.empty()) {
      return Status::Unavailable("listening on " + host + ":" + std::to_string(port) +
                                 ": cannot resolve the host: " + ec.message());
    }
    ep = found.begin()->endpoint();
  }
  auto fail = [&](const char* what) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    return Status::Unavailable(std::string(what) + " " + host + ":" + std::to_string(port) +
                               ": " + ec.message());
  };
  if (acceptor_.open(ep.protocol(), ec)) return fail("opening a socket for");
  if (acceptor_.set_option(net::socket_base::reuse_address(true), ec)) return fail("SO_REUSEADDR on");
  if (acceptor_.bind(ep, ec)) return fail("binding");
  if (acceptor_.listen(net::socket_base::max_listen_connections, ec)) return fail("listening on");
  port_ = acceptor_.local_endpoint(ec).port();
  // Each connection holds a descriptor: keep half the process's limit for
  // everything else (VM sockets, pidfds, files), whatever was asked.
  max_connections_ = limits.max_connections;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      max_connections_ > rl.rlim_cur / 2) {
    max_connections_ = std::max<size_t>(16, rl.rlim_cur / 2);
    log::Warn("http connection cap lowered to half the descriptor limit",
              {{"asked", limits.max_connections}, {"cap", max_connections_},
               {"rlimit_nofile", static_cast<uint64_t>(rl.rlim_cur)}});
  }
  return Status::Ok();
}

void HttpServer::Core::Run() {
  work_.emplace(ioc.get_executor());
  net::post(acceptor_.get_executor(), [self = shared_from_this()] { self->Accept(); });
  for (int i = 0; i < std::max(1, limits.io_threads); ++i) {
    threads_.emplace_back([this] {
      for (;;) {
        try {
          ioc.run();
          return;
        } catch (const std::exception& e) {
          // A handler that throws is a bug; keep serving the others.
          log::Error("http io thread caught an exception", {{"error", e.what()}});
        }
      }
    });
  }
}

void HttpServer::Core::Accept() {
  if (stopping) return;
  acceptor_.async_accept(net::make_strand(ioc),
                         [self = shared_from_this()](boost::system::error_code ec,
                                                     tcp::socket socket) {
                           self->OnAccept(ec, std::move(socket));
                         });
}

void HttpServer::Core::OnAccept(boost::system::error_code ec, tcp::socket socket) {
  if (stopping || ec == net::error::operation_aborted) return;
  if (ec) {
    // Out of descriptors (EMFILE/ENFILE) or a transient error: try again
    // shortly rather than spin or stop serving.
    Event("connection_limit");
    log::Warn("http accept failed", {{"error", ec.message()}});
    retry_timer_.emplace(acceptor_.get_executor(), std::chrono::milliseconds(50));
    retry_timer_->async_wait([self = shared_from_this()](boost::system::error_code) {
      self->Accept();
    });
    return;
  }
  if (!MakeRoom()) {
    Event("connection_limit");
    boost::system::error_code ignored;
    socket.close(ignored);
  } else {
    socket.set_option(tcp::no_delay(true), ec);
    StartConnection(shared_from_this(), std::move(socket));
  }
  Accept();
}

bool HttpServer::Core::MakeRoom() {
  std::shared_ptr<ConnBase> victim;
  {
    std::lock_guard l(mu_);
    size_t live = 0;
    ConnBase* oldest = nullptr;
    for (const auto& [c, w] : conns_) {
      if (c->closing()) continue;
      ++live;
      if (c->evictable() && (!oldest || c->waiting_since() < oldest->waiting_since())) oldest = c;
    }
    if (live < max_connections_) return true;
    if (!oldest) return false;
    victim = conns_[oldest].lock();
  }
  if (!victim) return true;  // it is going away on its own
  victim->PostClose("evicted");
  return true;
}

void HttpServer::Core::StopAccepting() {
  if (stopping.exchange(true)) return;
  net::post(acceptor_.get_executor(), [self = shared_from_this()] {
    boost::system::error_code ignored;
    self->acceptor_.close(ignored);
    if (self->retry_timer_) self->retry_timer_->cancel();
  });
  std::vector<std::shared_ptr<ConnBase>> all;
  {
    std::lock_guard l(mu_);
    for (const auto& [c, w] : conns_)
      if (auto s = w.lock()) all.push_back(std::move(s));
  }
  for (auto& c : all) c->PostCloseIfNotAnswering();
}

void HttpServer::Core::Stop() {
  StopAccepting();
  std::vector<std::shared_ptr<ConnBase>> all;
  {
    std::lock_guard l(mu_);
    for (const auto& [c, w] : conns_)
      if (auto s = w.lock()) all.push_back(std::move(s));
  }
  for (auto& c : all) c->PostClose(nullptr);
  all.clear();
  // Let the closes run, then stop the threads even if a handler still holds
  // a connection (its Responder is broken by now and posts nothing).
  work_.reset();
  for (int i = 0; i < 200 && connections() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ioc.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

HttpServer::HttpServer(HttpLimits limits, Gate gate, EventSink events,
                       std::optional<HttpTls> tls)
    : core_(std::make_shared<Core>(limits, std::move(gate), std::move(events), std::move(tls))) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start(const std::string& host, int port) {
  RETURN_IF_ERROR(core_->Listen(host, port));
  core_->Run();
  return Status::Ok();
}

int HttpServer::port() const { return core_->port(); }

void HttpServer::StopAccepting() { core_->StopAccepting(); }

void HttpServer::Stop() { core_->Stop(); }

size_t HttpServer::connections() const { return core_->connections(); }

}  // namespace kubicle::noderuntime::server
