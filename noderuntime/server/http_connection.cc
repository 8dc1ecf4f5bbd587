// One HTTP/1.1 connection of HttpServer (http_server.h states the
// guarantees): TLS handshake, request admission, bodies, answers and
// streams, lingering after a refusal. The hand-off of an upgraded
// connection is in http_upgrade.cc.
#include "noderuntime/server/http_connection.h"

#include <sys/socket.h>

#include <cerrno>
#include <limits>
#include <thread>

#include "common/log.h"

namespace kubicle::noderuntime::server {
namespace connection {

bool IsTimeout(const error_code& ec) { return ec == beast::error::timeout; }

Response PlainError(int code, const char* err, const std::string& message) {
  Response r;
  r.code = code;
  r.body = std::string(R"({"error":{"code":")") + err + R"(","message":")" + message + "\"}}";
  return r;
}

namespace {

// A parse error of the peer's making (not EOF or a socket error).
bool IsBadRequest(const error_code& ec) {
  return ec.category() == make_error_code(http::error::bad_method).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

// The Upgrade protocol a request asks for: HTTP/1.1, "upgrade" among the
// Connection header's tokens, a non-empty Upgrade header. Else empty.
template <class Fields>
std::string RequestedUpgrade(const http::request<http::empty_body, Fields>& req) {
  if (req.version() != 11) return "";
  auto conn = req.find(http::field::connection);
  auto up = req.find(http::field::upgrade);
  if (conn == req.end() || up == req.end()) return "";
  for (auto token : http::token_list(conn->value())) {
    if (beast::iequals(token, "upgrade")) return std::string(up->value());
  }
  return "";
}

// The Responder handed to a handler: one request of one connection.
template <class Stream>
class Reply final : public Responder {
 public:
  Reply(std::shared_ptr<Connection<Stream>> c, uint64_t gen) : c_(std::move(c)), gen_(gen) {}
  void Send(Response r) override { c_->Send(gen_, std::move(r)); }
  void StartStream(int code, const std::string& ct) override { c_->StartStream(gen_, code, ct); }
  bool Write(std::string data) override { return c_->Write(gen_, std::move(data)); }
  void EndStream() override { c_->EndStream(gen_); }
  void Abort() override { c_->Abort(gen_); }
  void SwitchProtocols(Response r, UniqueFd upstream, std::shared_ptr<void> hold) override {
    c_->SwitchProtocols(gen_, std::move(r), std::move(upstream), std::move(hold));
  }
  bool replied() const override { return c_->Replied(gen_); }

 private:
  std::shared_ptr<Connection<Stream>> c_;
  uint64_t gen_;
};

}  // namespace

// TLS: the handshake is held to the header deadline, like the header that
// follows it (a client that opens a connection and stalls costs a
// descriptor for at most that long).
template <class Stream>
void Connection<Stream>::Handshake() {
  SetWaiting(true);
  Lowest().expires_after(limits_.header_timeout);
  if constexpr (kTls) {
    stream_.async_handshake(net::ssl::stream_base::server,
                            [self = this->shared_from_this()](error_code ec) {
                              if (ec) return self->Close("tls_handshake");
                              self->WaitRequest(/*first=*/true);
                            });
  }
}

template <class Stream>
void Connection<Stream>::WaitRequest(bool first) {
  if (closed_) return;
  if (core_->stopping) return Close(nullptr);
  SetWaiting(true);
  if (buffer_.size() > 0) return ReadHeader();  // pipelined
  // Nothing costs more than a descriptor until the first byte: a fresh
  // connection gets the header deadline, a kept-alive one the idle one.
  Lowest().expires_after(first ? limits_.header_timeout : limits_.idle_timeout);
  stream_.async_read_some(buffer_.prepare(4096), [self = this->shared_from_this()](
                                                     error_code ec, size_t n) {
    if (ec) return self->Close(IsTimeout(ec) ? "header_timeout" : nullptr);
    self->buffer_.commit(n);
    self->ReadHeader();
  });
}

template <class Stream>
void Connection<Stream>::ReadHeader() {
  head_.emplace();
  head_->header_limit(static_cast<uint32_t>(limits_.max_header_bytes));
  // The Gate's limit is applied once it has decided. Not boost::none: Beast
  // 1.74 compares a Content-Length against an empty optional as "over".
  head_->body_limit(std::numeric_limits<std::uint64_t>::max());
  Lowest().expires_after(limits_.header_timeout);
  http::async_read_header(stream_, buffer_, *head_,
                          [self = this->shared_from_this()](error_code ec, size_t) {
                            self->OnHeader(ec);
                          });
}

template <class Stream>
void Connection<Stream>::OnHeader(error_code ec) {
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    return Refuse(PlainError(431, "HeaderTooLarge",
                             "the request header exceeds " +
                                 std::to_string(limits_.max_header_bytes) + " bytes"),
                  "header_too_large");
  }
  if (IsTimeout(ec)) return Close("header_timeout");
  if (IsBadRequest(ec)) {
    return Refuse(PlainError(400, "BadRequest", "malformed HTTP request: " + ec.message()),
                  "bad_request");
  }
  if (ec) return Close(nullptr);
  SetWaiting(false);
  auto& req = head_->get();
  keep_alive_ = req.keep_alive();
  RequestHead h;
  h.method = std::string(req.method_string());
  h.target = std::string(req.target());
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    h.authorization = std::string(it->value());
  }
  if (auto n = head_->content_length()) h.content_length = *n;
  h.chunked = head_->chunked();
  h.upgrade = upgrade_ = RequestedUpgrade(req);
  bool expect_continue = false;
  if (auto it = req.find(http::field::expect); it != req.end()) {
    expect_continue = beast::iequals(it->value(), "100-continue");
  }
  Decision d = core_->gate(h);
  if (auto* refusal = std::get_if<Response>(&d)) return Refuse(std::move(*refusal), nullptr);
  Admitted a = std::move(std::get<Admitted>(d));
  if (h.content_length && *h.content_length > a.body_limit) {
    return Refuse(PlainError(413, "PayloadTooLarge",
                             "request body of " + std::to_string(*h.content_length) +
                                 " bytes exceeds the limit of " + std::to_string(a.body_limit) +
                                 " bytes"),
                  "body_too_large");
  }
  Admit(std::move(a), expect_continue);
}

template <class Stream>
void Connection<Stream>::Admit(Admitted a, bool expect_continue) {
  admitted_ = std::move(a);
  {
    std::lock_guard l(mu_);
    ++gen_;
    replied_ = end_requested_ = false;
    queued_ = 0;
    out_.clear();
  }
  header_done_ = writing_ = last_sent_ = false;
  const bool has_body = head_->chunked() || head_->content_length().value_or(0) > 0;
  if (!has_body) return Run("");
  if (!expect_continue) return ReadBody();
  static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  Lowest().expires_after(limits_.write_timeout);
  net::async_write(stream_, net::buffer(kContinue),
                   [self = this->shared_from_this()](error_code ec, size_t) {
                     if (ec) return self->Close(IsTimeout(ec) ? "write_timeout" : nullptr);
                     self->ReadBody();
                   });
}

template <class Stream>
void Connection<Stream>::ReadBody() {
  body_.emplace(std::move(*head_));
  head_.reset();
  body_->body_limit(admitted_.body_limit);
  Lowest().expires_after(limits_.body_timeout);
  http::async_read(stream_, buffer_, *body_,
                   [self = this->shared_from_this()](error_code ec, size_t) { self->OnBody(ec); });
}

template <class Stream>
void Connection<Stream>::OnBody(error_code ec) {
  if (ec == http::error::body_limit) {
    return Refuse(PlainError(413, "PayloadTooLarge",
                             "request body exceeds the limit of " +
                                 std::to_string(admitted_.body_limit) + " bytes"),
                  "body_too_large");
  }
  if (IsTimeout(ec)) return Close("body_timeout");
  if (IsBadRequest(ec)) {
    return Refuse(PlainError(400, "BadRequest", "malformed request body: " + ec.message()),
                  "bad_request");
  }
  if (ec) return Close(nullptr);
  std::string body = std::move(body_->get().body());
  body_.reset();
  Run(std::move(body));
}

template <class Stream>
void Connection<Stream>::Run(std::string body) {
  handed_off_ = true;
  Lowest().expires_never();
  uint64_t gen;
  {
    std::lock_guard l(mu_);
    gen = gen_;
  }
  auto reply = std::make_shared<Reply<Stream>>(this->shared_from_this(), gen);
  Handler handler = std::move(admitted_.handler);
  if (admitted_.inline_handler) {
    handler(std::move(body), reply);
    if (!reply->replied()) reply->Send(PlainError(500, "Internal", "no answer"));
    return;
  }
  try {
    std::thread([handler = std::move(handler), body = std::move(body), reply]() mutable {
      handler(std::move(body), reply);
      if (!reply->replied()) reply->Send(PlainError(500, "Internal", "no answer"));
    }).detach();
  } catch (const std::system_error& e) {
    log::Warn("no thread for an http request", {{"error", e.what()}});
    reply->Send(PlainError(503, "Unavailable", "the node cannot start a request thread"));
  }
}

template <class Stream>
void Connection<Stream>::Refuse(Response r, const char* reason) {
  core_->Event(reason);
  SetWaiting(false);
  {
    std::lock_guard l(mu_);
    ++gen_;  // no handler may answer this request
    replied_ = true;
  }
  WriteResponse(std::move(r), /*refusal=*/true);
}

template <class Stream>
void Connection<Stream>::Send(uint64_t gen, Response r) {
  {
    std::lock_guard l(mu_);
    if (broken_ || gen != gen_ || replied_) return;
    replied_ = true;
  }
  net::post(stream_.get_executor(), [self = this->shared_from_this(), r = std::move(r)]() mutable {
    self->WriteResponse(std::move(r), /*refusal=*/false);
  });
}

template <class Stream>
void Connection<Stream>::WriteResponse(Response r, bool refusal) {
  if (closed_) return;
  auto msg = std::make_shared<http::response<http::string_body>>();
  msg->version(11);
  msg->result(static_cast<unsigned>(r.code));
  msg->set(http::field::content_type, r.content_type);
  for (auto& [k, v] : r.headers) msg->set(k, v);
  msg->body() = std::move(r.body);
  msg->keep_alive(!refusal && keep_alive_ && !core_->stopping);
  msg->prepare_payload();
  auto sr = std::make_shared<http::serializer<false, http::string_body>>(*msg);
  WriteLoop(std::move(msg), std::move(sr), refusal);
}

// Writes in pieces, each with the no-progress deadline: a slow reader may
// take its time, one that stops reading is closed.
template <class Stream>
template <class Msg>
void Connection<Stream>::WriteLoop(
    std::shared_ptr<Msg> msg, std::shared_ptr<http::serializer<false, typename Msg::body_type>> sr,
    bool refusal) {
  Lowest().expires_after(limits_.write_timeout);
  http::async_write_some(
      stream_, *sr,
      [self = this->shared_from_this(), msg, sr, refusal](error_code ec, size_t) mutable {
        if (ec) return self->Close(IsTimeout(ec) ? "write_timeout" : nullptr);
        if (!sr->is_done()) return self->WriteLoop(std::move(msg), std::move(sr), refusal);
        if (refusal) return self->Linger();
        self->keep_alive_ = msg->keep_alive();
        self->Finish();
      });
}

template <class Stream>
void Connection<Stream>::StartStream(uint64_t gen, int code, const std::string& content_type) {
  {
    std::lock_guard l(mu_);
    if (broken_ || gen != gen_ || replied_) return;
    replied_ = true;
  }
  net::post(stream_.get_executor(), [self = this->shared_from_this(), code, content_type] {
    self->WriteStreamHeader(code, content_type);
  });
}

template <class Stream>
void Connection<Stream>::WriteStreamHeader(int code, std::string content_type) {
  if (closed_) return;
  auto msg = std::make_shared<http::response<http::empty_body>>();
  msg->version(11);
  msg->result(static_cast<unsigned>(code));
  msg->set(http::field::content_type, content_type);
  msg->keep_alive(keep_alive_ && !core_->stopping);
  msg->chunked(true);
  keep_alive_ = msg->keep_alive();
  auto sr = std::make_shared<http::serializer<false, http::empty_body>>(*msg);
  Lowest().expires_after(limits_.write_timeout);
  http::async_write_header(stream_, *sr,
                           [self = this->shared_from_this(), msg, sr](error_code ec, size_t) {
                             if (ec) return self->Close(IsTimeout(ec) ? "write_timeout" : nullptr);
                             self->header_done_ = true;
                             self->Pump();
                           });
}

template <class Stream>
bool Connection<Stream>::Write(uint64_t gen, std::string data) {
  if (data.empty()) return true;  // an empty chunk would end the stream
  {
    std::unique_lock l(mu_);
    // Backpressure: the producer waits for the client, never the heap.
    cv_.wait(l, [&] { return broken_ || gen != gen_ || queued_ <= limits_.stream_high_water; });
    if (broken_ || gen != gen_ || end_requested_) return false;
    queued_ += data.size();
    out_.push_back(std::move(data));
  }
  net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Pump(); });
  return true;
}

template <class Stream>
void Connection<Stream>::EndStream(uint64_t gen) {
  {
    std::lock_guard l(mu_);
    if (broken_ || gen != gen_) return;
    end_requested_ = true;
  }
  net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Pump(); });
}

template <class Stream>
void Connection<Stream>::Pump() {
  if (closed_ || writing_ || !header_done_ || last_sent_) return;
  const std::string* next = nullptr;
  {
    std::lock_guard l(mu_);
    if (!out_.empty()) {
      next = &out_.front();  // a deque keeps it in place until popped
    } else if (!end_requested_) {
      return;
    }
  }
  writing_ = true;
  Lowest().expires_after(limits_.write_timeout);
  auto self = this->shared_from_this();
  if (!next) {
    last_sent_ = true;
    net::async_write(stream_, http::make_chunk_last(), [self](error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->Close(IsTimeout(ec) ? "write_timeout" : nullptr);
      self->Finish();
    });
    return;
  }
  net::async_write(stream_, http::make_chunk(net::buffer(*next)), [self](error_code ec, size_t) {
    self->writing_ = false;
    if (ec) return self->Close(IsTimeout(ec) ? "write_timeout" : nullptr);
    {
      std::lock_guard l(self->mu_);
      self->queued_ -= self->out_.front().size();
      self->out_.pop_front();
      self->cv_.notify_all();
    }
    self->Pump();
  });
}

// The answer is written: give the budget back, then the next request.
template <class Stream>
void Connection<Stream>::Finish() {
  handed_off_ = false;
  admitted_ = Admitted{};
  if (keep_alive_ && !core_->stopping) return WaitRequest(/*first=*/false);
  if constexpr (kTls) {
    // close_notify, so the client can tell the end from a cut; bounded.
    Lowest().expires_after(limits_.linger_timeout);
    stream_.async_shutdown([self = this->shared_from_this()](error_code) { self->Close(nullptr); });
    return;
  }
  error_code ignored;
  Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
  Close(nullptr);
}

// After a refusal: stop sending, then read and discard what the client is
// still sending for a short while (at most linger_timeout and 4 MiB), so it
// reads the answer before the close resets the connection. Nothing read
// so far is needed again: the parsers and the read buffer go now, so a
// lingering connection holds a descriptor and a timer, no bytes.
template <class Stream>
void Connection<Stream>::Linger() {
  handed_off_ = false;
  admitted_ = Admitted{};
  head_.reset();
  body_.reset();
  buffer_.clear();
  buffer_.shrink_to_fit();
  error_code ignored;
  Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
  Lowest().expires_never();
  linger_timer_.emplace(stream_.get_executor(), limits_.linger_timeout);
  linger_timer_->async_wait([self = this->shared_from_this()](error_code ec) {
    if (ec != net::error::operation_aborted) self->Close(nullptr);
  });
  LingerRead(4u << 20);
}

// Discards with MSG_TRUNC (the kernel drops the bytes, nothing is copied):
// a thousand lingering connections cost no buffers.
template <class Stream>
void Connection<Stream>::LingerRead(size_t left) {
  Lowest().socket().async_wait(
      tcp::socket::wait_read, [self = this->shared_from_this(), left](error_code ec) mutable {
        if (self->closed_) return;
        if (ec) return self->Close(nullptr);
        const int fd = self->Lowest().socket().native_handle();
        for (;;) {
          ssize_t n = ::recv(fd, nullptr, left, MSG_TRUNC | MSG_DONTWAIT);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          if (n <= 0 || static_cast<size_t>(n) >= left) return self->Close(nullptr);
          left -= static_cast<size_t>(n);
        }
        self->LingerRead(left);
      });
}

template <class Stream>
void Connection<Stream>::Close(const char* reason) {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  core_->Event(reason);
  BreakAnswer();
  error_code ignored;
  Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
  Lowest().close();
  if (upstream_) upstream_->close(ignored);
  handed_off_ = false;
  admitted_ = Admitted{};
  head_.reset();
  body_.reset();
  if (linger_timer_) linger_timer_->cancel();
}

// http_upgrade.cc defines (and instantiates) the upgrade hand-off.
template class Connection<PlainStream>;
template class Connection<TlsStream>;

}  // namespace connection

using connection::Connection;
using connection::PlainStream;
using connection::TlsStream;
namespace beast = boost::beast;

void StartConnection(std::shared_ptr<HttpServer::Core> core, tcp::socket socket) {
  if (core->ssl) {
    net::ssl::context& ctx = *core->ssl;
    std::make_shared<Connection<TlsStream>>(std::move(core),
                                            TlsStream(beast::tcp_stream(std::move(socket)), ctx))
        ->Start();
    return;
  }
  std::make_shared<Connection<PlainStream>>(std::move(core), PlainStream(std::move(socket)))
      ->Start();
}

}  // namespace kubicle::noderuntime::server
