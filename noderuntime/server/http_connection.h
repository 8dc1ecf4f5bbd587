// The connection of HttpServer, shared by its two halves: HTTP/1.1 request
// and answer handling (http_connection.cc) and the hand-off of an upgraded
// connection to a byte relay (http_upgrade.cc). Internal to
// noderuntime/server; http_server.h states the guarantees.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "common/unique_fd.h"
#include "noderuntime/server/http_server_internal.h"

namespace kubicle::noderuntime::server::connection {

namespace beast = boost::beast;
namespace http = beast::http;
using beast::error_code;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

bool IsTimeout(const error_code& ec);
// An answer written by the connection itself (a refusal), not a handler.
Response PlainError(int code, const char* err, const std::string& message);

// Every member without a lock is touched only on the connection's strand;
// the answer state shared with handler threads is under mu_.
template <class Stream>
class Connection final : public ConnBase,
                         public std::enable_shared_from_this<Connection<Stream>> {
 public:
  Connection(std::shared_ptr<HttpServer::Core> core, Stream stream)
      : core_(std::move(core)),
        limits_(core_->limits),
        stream_(std::move(stream)),
        buffer_(limits_.max_header_bytes + 64 * 1024) {}
  ~Connection() override { core_->Unregister(this); }

  void Start() {
    core_->Register(this, this->weak_from_this());
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kTls) {
        self->Handshake();
      } else {
        self->WaitRequest(/*first=*/true);
      }
    });
  }

  void PostClose(const char* reason) override {
    closing_ = true;
    BreakAnswer();
    net::post(stream_.get_executor(),
              [self = this->shared_from_this(), reason] { self->Close(reason); });
  }
  // Not yet given to a handler (waiting, or reading a body): nothing has
  // reached the service, so it may go.
  void PostCloseIfNotAnswering() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (!self->handed_off_) self->Close(nullptr);
    });
  }

  // The Responder side, called from handler threads; `gen` is the request
  // the handler was given, so a stale call never touches a later request.
  void Send(uint64_t gen, Response r);
  void StartStream(uint64_t gen, int code, const std::string& content_type);
  bool Write(uint64_t gen, std::string data);
  void EndStream(uint64_t gen);
  void Abort(uint64_t gen) {
    {
      std::lock_guard l(mu_);
      if (gen != gen_) return;
    }
    PostClose(nullptr);
  }
  void SwitchProtocols(uint64_t gen, Response r, UniqueFd upstream, std::shared_ptr<void> hold);
  bool Replied(uint64_t gen) const {
    std::lock_guard l(mu_);
    return gen != gen_ || replied_;
  }

 private:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  void Handshake();
  void WaitRequest(bool first);
  void ReadHeader();
  void OnHeader(error_code ec);
  void Admit(Admitted a, bool expect_continue);
  void ReadBody();
  void OnBody(error_code ec);
  void Run(std::string body);
  void Refuse(Response r, const char* reason);
  void WriteResponse(Response r, bool refusal);
  template <class Msg>
  void WriteLoop(std::shared_ptr<Msg> msg,
                 std::shared_ptr<http::serializer<false, typename Msg::body_type>> sr,
                 bool refusal);
  void WriteStreamHeader(int code, std::string content_type);
  void WriteSwitch(Response r, std::shared_ptr<UniqueFd> upstream, std::shared_ptr<void> hold);
  void StartRelay(UniqueFd upstream, std::shared_ptr<void> hold);
  void Pump();
  void Finish();
  void Linger();
  void LingerRead(size_t left);
  void Close(const char* reason);
  void BreakAnswer() {
    std::lock_guard l(mu_);
    broken_ = true;
    cv_.notify_all();
  }
  auto& Lowest() { return beast::get_lowest_layer(stream_); }

  std::shared_ptr<HttpServer::Core> core_;
  const HttpLimits& limits_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> head_;
  std::optional<http::request_parser<http::string_body>> body_;
  Admitted admitted_;
  bool keep_alive_ = false;
  bool handed_off_ = false;  // given to a handler, until its answer is written
  bool closed_ = false;
  std::optional<net::steady_timer> linger_timer_;
  std::string upgrade_;                 // what the request asked to upgrade to
  std::optional<tcp::socket> upstream_;  // the relay's other side, after a 101

  // Shared with handler threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t gen_ = 0;
  bool replied_ = false;
  bool broken_ = false;
  bool end_requested_ = false;
  size_t queued_ = 0;
  std::deque<std::string> out_;
  // Strand-only stream state.
  bool header_done_ = false;
  bool writing_ = false;
  bool last_sent_ = false;
};

}  // namespace kubicle::noderuntime::server::connection
