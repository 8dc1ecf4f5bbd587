// HttpServer: the data plane's HTTP/1.1 server, on Boost.Beast over
// Boost.Asio (docs/node.md, "Limits and fairness" says why not cpprestsdk's
// listener). Internal to noderuntime/server: ApiServer puts the routes, auth
// and budgets on top through a Gate.
//
// What it guarantees, whatever the peer sends:
//  - The header is read with a size cap (431 above it) and a deadline that
//    counts from its first byte (slowloris); a connection that sends nothing
//    is closed after `header_timeout` (first request) or `idle_timeout`
//    (between keep-alive requests).
//  - The Gate decides from the header alone, before any body byte is read:
//    a refusal is answered and the connection closed (after a short
//    lingering read that discards, so the client sees the answer instead of
//    a reset); an admission names the body limit, checked against a
//    declared Content-Length before reading and while reading a chunked
//    body (413 as soon as it is exceeded), within `body_timeout`.
//  - At most `max_connections` connections: when full, the one that has
//    waited longest for a request header is closed to make room (it has
//    cost the node nothing yet), else the newcomer is.
//  - Answers are written with a no-progress deadline (`write_timeout`);
//    a streamed answer blocks its producer while more than
//    `stream_high_water` bytes wait to be written, so a client that stops
//    reading stops the producer instead of growing the daemon.
//  - Handlers run on a thread of their own (service calls block), unless
//    admitted `inline_handler` (cheap, non-blocking: /healthz).
//  - With HttpTls every connection is TLS (1.2 or later) from its first
//    byte, the handshake within `header_timeout`; the limits above apply to
//    what is inside.
//  - A request that asks for an upgrade ("Connection: Upgrade" and an
//    "Upgrade" protocol, HTTP/1.1) may be answered with SwitchProtocols:
//    101, then the connection is a byte relay to a descriptor the handler
//    opened (http_relay.h: `relay_buffer_bytes` per direction, closed after
//    `relay_idle_timeout` without traffic). The request's admission is
//    released at the 101; what the handler passes as `hold` stays until
//    the relay ends.
//
// Start/Stop are not thread-safe with each other.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime::server {

struct HttpLimits {
  size_t max_header_bytes = 16 << 10;  // request line and header fields
  size_t max_connections = 4096;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds write_timeout{30000};
  std::chrono::milliseconds linger_timeout{1000};
  size_t stream_high_water = 1 << 20;
  int io_threads = 2;
  size_t relay_buffer_bytes = 64 << 10;
  std::chrono::milliseconds relay_idle_timeout{15 * 60 * 1000};
};

// The serving certificate (PEM: the leaf first, then any intermediates) and
// its private key.
struct HttpTls {
  std::string cert_chain_pem;
  std::string key_pem;
};

// A request as the Gate sees it: its header only.
struct RequestHead {
  std::string method;
  std::string target;                     // as sent: path?query
  std::string authorization;              // empty when absent
  std::optional<uint64_t> content_length;
  bool chunked = false;
  // The Upgrade header's value when the request asks for an upgrade
  // (HTTP/1.1, "upgrade" among the Connection tokens); else empty.
  std::string upgrade;
};

struct Response {
  int code = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields
};

// The connection's side of a request being answered. Thread-safe; either
// Send once, or StartStream, Write..., EndStream. After the client is gone
// every call is a no-op (Write returns false).
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void Send(Response response) = 0;
  virtual void StartStream(int code, const std::string& content_type) = 0;
  // Queues one chunk; blocks while more than stream_high_water bytes wait.
  virtual bool Write(std::string data) = 0;
  virtual void EndStream() = 0;
  // Ends a streamed answer as failed: the connection is closed without the
  // last chunk, so the client sees a truncated body, never a short one.
  virtual void Abort() = 0;
  // Answers 101 Switching Protocols (with `response.headers` added to
  // Connection and Upgrade) and relays bytes between the client and
  // `upstream`, a connected stream socket, until both have ended; `hold`
  // is kept until then. A request that did not ask for an upgrade is
  // answered 500 instead and `upstream` closed.
  virtual void SwitchProtocols(Response response, UniqueFd upstream,
                               std::shared_ptr<void> hold) = 0;
  virtual bool replied() const = 0;
};

using Handler = std::function<void(std::string body, std::shared_ptr<Responder> responder)>;

struct Admitted {
  size_t body_limit = 0;
  Handler handler;
  bool inline_handler = false;
  // Kept until the answer is written or the connection ends (an
  // Admission::Ticket, for the budgets).
  std::shared_ptr<void> hold;
};

// A Response is a refusal: answered, then the connection is closed.
using Decision = std::variant<Response, Admitted>;
using Gate = std::function<Decision(const RequestHead& head)>;
// Refusals and timeouts the server itself decides, by reason
// ("header_too_large", "body_too_large", "bad_request", "header_timeout",
// "body_timeout", "write_timeout", "evicted", "connection_limit",
// "tls_handshake", "stream_idle_timeout").
using EventSink = std::function<void(const char* reason)>;

class HttpServer {
 public:
  HttpServer(HttpLimits limits, Gate gate, EventSink events,
             std::optional<HttpTls> tls = std::nullopt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0 picks one: see port()) and starts the I/O
  // threads. Unavailable if the address cannot be bound; InvalidArgument if
  // the TLS certificate or key does not load.
  Status Start(const std::string& host, int port);
  int port() const;
  // Stops accepting and closes every connection that is not answering a
  // request; those finish their answer, then close. Idempotent.
  void StopAccepting();
  // Closes every connection and joins the I/O threads. Handlers still
  // running see their Responder fail. Idempotent.
  void Stop();
  size_t connections() const;

  class Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace kubicle::noderuntime::server
