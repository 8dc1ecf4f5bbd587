// Internal to http_server.cc and http_connection.cc: the server's shared
// state (Core: the io_context, the acceptor, the connection registry) and
// the registry's view of a connection.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "noderuntime/server/http_server.h"

namespace kubicle::noderuntime::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

// What the registry needs of a connection: eviction and shutdown.
class ConnBase {
 public:
  virtual ~ConnBase() = default;
  // Closes the connection from any thread: producers blocked on it return
  // at once; the socket is closed on the connection's strand.
  virtual void PostClose(const char* reason) = 0;
  // Closes it if it is not answering a request (waiting for or reading one).
  virtual void PostCloseIfNotAnswering() = 0;
  // Waiting for a request header (or reading one): costs the node nothing
  // yet, so it is the one to close when the connection table is full.
  bool evictable() const { return waiting_.load() && !closing_.load(); }
  SteadyClock::time_point waiting_since() const {
    return SteadyClock::time_point(SteadyClock::duration(waiting_since_.load()));
  }
  bool closing() const { return closing_.load(); }

 protected:
  void SetWaiting(bool waiting) {
    if (waiting) waiting_since_ = SteadyClock::now().time_since_epoch().count();
    waiting_ = waiting;
  }
  std::atomic<bool> closing_{false};

 private:
  std::atomic<bool> waiting_{false};
  std::atomic<SteadyClock::rep> waiting_since_{0};
};

class HttpServer::Core : public std::enable_shared_from_this<HttpServer::Core> {
 public:
  Core(HttpLimits l, Gate g, EventSink e, std::optional<HttpTls> t)
      : limits(l),
        gate(std::move(g)),
        events(std::move(e)),
        tls_pem(std::move(t)),
        acceptor_(net::make_strand(ioc)) {}

  const HttpLimits limits;
  const Gate gate;
  const EventSink events;
  const std::optional<HttpTls> tls_pem;
  std::unique_ptr<net::ssl::context> ssl;  // set by Listen when tls_pem is
  net::io_context ioc;
  std::atomic<bool> stopping{false};

  void Event(const char* reason) const {
    if (events && reason) events(reason);
  }
  void Register(ConnBase* c, std::weak_ptr<ConnBase> w);
  void Unregister(ConnBase* c);
  size_t connections() const;

  Status Listen(const std::string& host, int port);
  void Run();
  void StopAccepting();
  void Stop();
  int port() const { return port_; }

 private:
  void Accept();
  void OnAccept(boost::system::error_code ec, tcp::socket socket);
  // Frees a slot when the table is full; false when none can be freed.
  bool MakeRoom();

  tcp::acceptor acceptor_;
  std::optional<net::steady_timer> retry_timer_;
  int port_ = 0;
  size_t max_connections_ = 0;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  std::map<ConnBase*, std::weak_ptr<ConnBase>> conns_;
};

// Starts serving an accepted connection (http_connection.cc): TLS when
// core->ssl is set, else plain TCP.
void StartConnection(std::shared_ptr<HttpServer::Core> core, tcp::socket socket);

}  // namespace kubicle::noderuntime::server
