// Relay: moves bytes both ways between two Asio streams until both have
// ended, for the data plane's port streams (docs/api.md, "Ports"): the
// client's connection (plain TCP or TLS) on one side, a TCP connection to
// the guest on the other. The kubectl plugin's port-forward and the bench
// use it the same way, with other stream types.
//
// Contracts:
//  - At most `buffer_bytes` per direction is held: a direction reads again
//    only once its last read has been written, so a side that stops
//    reading stops the other side's reads (TCP's own backpressure), never
//    the heap.
//  - An end of stream on one side half-closes the other side's sending
//    direction (shutdown(SHUT_WR)); the other direction goes on. A TLS
//    side cannot be half-closed by this relay (a close_notify would need
//    the read in flight): an end towards it ends the whole relay.
//  - `idle_timeout` without a byte moved either way ends the relay.
//  - `on_done(reason)` runs once, on the streams' executor, when both
//    directions have ended (reason nullptr), one failed (nullptr) or the
//    relay idled out ("stream_idle_timeout"); the owner then closes both
//    streams. Closing either stream from outside (on that executor) ends
//    the relay too.
//  - Both streams must use one strand (or a single-threaded executor);
//    they must outlive the relay, which keeps `owner` alive until
//    on_done has run.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>

namespace kubicle::noderuntime::api {

struct RelayLimits {
  size_t buffer_bytes = 64 << 10;  // per direction
  std::chrono::milliseconds idle_timeout{15 * 60 * 1000};
};

namespace relay_detail {

using boost::system::error_code;
namespace beast = boost::beast;
using tcp = boost::asio::ip::tcp;

// A clean end of the peer's sending direction (FIN, or a TLS close_notify).
bool IsEndOfStream(const error_code& ec);
// Half-closes `s`'s sending direction; false when the stream cannot be
// half-closed (TLS), so the relay must end instead.
bool ShutdownSend(tcp::socket& s);
bool ShutdownSend(beast::tcp_stream& s);
template <class Next>
bool ShutdownSend(beast::ssl_stream<Next>&) {
  return false;
}
template <class Next>
bool ShutdownSend(boost::asio::ssl::stream<Next>&) {
  return false;
}

}  // namespace relay_detail

template <class A, class B>
class Relay : public std::enable_shared_from_this<Relay<A, B>> {
 public:
  using OnDone = std::function<void(const char* reason)>;

  // Starts relaying; `a_to_b_first` (bytes already read from `a`, e.g.
  // past an HTTP header) are written to `b` before anything else.
  static void Start(A& a, B& b, std::string a_to_b_first, RelayLimits limits,
                    std::shared_ptr<void> owner, OnDone on_done) {
    auto r = std::shared_ptr<Relay>(
        new Relay(a, b, limits, std::move(owner), std::move(on_done)));
    r->Begin(std::move(a_to_b_first));
  }

 private:
  using error_code = relay_detail::error_code;

  Relay(A& a, B& b, RelayLimits limits, std::shared_ptr<void> owner, OnDone on_done)
      : a_(a),
        b_(b),
        limits_(limits),
        owner_(std::move(owner)),
        on_done_(std::move(on_done)),
        timer_(a.get_executor()),
        a_buf_(limits.buffer_bytes),
        b_buf_(limits.buffer_bytes) {}

  void Begin(std::string first) {
    Touch();
    ArmIdle(limits_.idle_timeout);
    Pump(b_, a_, b_buf_, &b_ended_);
    if (first.empty()) return Pump(a_, b_, a_buf_, &a_ended_);
    auto data = std::make_shared<std::string>(std::move(first));
    boost::asio::async_write(b_, boost::asio::buffer(*data),
                             [self = this->shared_from_this(), data](error_code ec, size_t) {
                               if (ec) return self->End(nullptr);
                               self->Pump(self->a_, self->b_, self->a_buf_, &self->a_ended_);
                             });
  }

  // One direction: read at most a buffer, write it all, read again.
  template <class From, class To>
  void Pump(From& from, To& to, std::vector<char>& buf, bool* ended) {
    if (done_) return;
    from.async_read_some(
        boost::asio::buffer(buf),
        [self = this->shared_from_this(), &from, &to, &buf, ended](error_code ec, size_t n) {
          if (self->done_) return;
          if (ec) return self->OnReadEnd(to, ended, ec);
          self->Touch();
          boost::asio::async_write(
              to, boost::asio::buffer(buf.data(), n),
              [self, &from, &to, &buf, ended](error_code wec, size_t) {
                if (wec) return self->End(nullptr);
                self->Touch();
                self->Pump(from, to, buf, ended);
              });
        });
  }

  template <class To>
  void OnReadEnd(To& to, bool* ended, const error_code& ec) {
    if (!relay_detail::IsEndOfStream(ec) || !relay_detail::ShutdownSend(to)) return End(nullptr);
    *ended = true;
    if (a_ended_ && b_ended_) End(nullptr);
  }

  void Touch() { last_ = std::chrono::steady_clock::now(); }

  // The timer fires at most once per idle period; traffic only moves the
  // time stamp, so a busy relay costs no timer operations.
  void ArmIdle(std::chrono::steady_clock::duration after) {
    timer_.expires_after(after);
    timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (ec || self->done_) return;
      auto idle = std::chrono::steady_clock::now() - self->last_;
      if (idle >= self->limits_.idle_timeout) return self->End("stream_idle_timeout");
      self->ArmIdle(self->limits_.idle_timeout - idle);
    });
  }

  void End(const char* reason) {
    if (done_) return;
    done_ = true;
    timer_.cancel();
    OnDone done = std::move(on_done_);
    if (done) done(reason);
    owner_.reset();
  }

  A& a_;
  B& b_;
  const RelayLimits limits_;
  std::shared_ptr<void> owner_;
  OnDone on_done_;
  boost::asio::steady_timer timer_;
  std::chrono::steady_clock::time_point last_;
  std::vector<char> a_buf_, b_buf_;  // a->b and b->a
  bool a_ended_ = false, b_ended_ = false;
  bool done_ = false;
};

}  // namespace kubicle::noderuntime::api
