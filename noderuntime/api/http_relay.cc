#include "noderuntime/api/http_relay.h"

namespace kubicle::noderuntime::api::relay_detail {

bool IsEndOfStream(const error_code& ec) {
  // A TLS peer that sent close_notify reads as eof; one that only closed
  // TCP is stream_truncated, which is no clean end (a cut connection).
  return ec == boost::asio::error::eof;
}

bool ShutdownSend(tcp::socket& s) {
  error_code ec;
  s.shutdown(tcp::socket::shutdown_send, ec);
  return !ec;
}

bool ShutdownSend(beast::tcp_stream& s) { return ShutdownSend(s.socket()); }

}  // namespace kubicle::noderuntime::api::relay_detail
