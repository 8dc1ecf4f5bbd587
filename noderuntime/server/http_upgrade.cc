// The hand-off of an upgraded connection (101 Switching Protocols) to a
// byte relay between the client and a handler's upstream socket
// (http_relay.h): the ports route's kubicle-tcp streams.
#include <memory>
#include <string>
#include <utility>

#include "noderuntime/server/http_connection.h"
#include "noderuntime/api/http_relay.h"

namespace kubicle::noderuntime::server::connection {

template <class Stream>
void Connection<Stream>::SwitchProtocols(uint64_t gen, Response r, UniqueFd upstream,
                                         std::shared_ptr<void> hold) {
  {
    std::lock_guard l(mu_);
    if (broken_ || gen != gen_ || replied_) return;
    replied_ = true;
  }
  auto fd = std::make_shared<UniqueFd>(std::move(upstream));
  net::post(stream_.get_executor(), [self = this->shared_from_this(), r = std::move(r), fd,
                                     hold = std::move(hold)]() mutable {
    self->WriteSwitch(std::move(r), std::move(fd), std::move(hold));
  });
}

template <class Stream>
void Connection<Stream>::WriteSwitch(Response r, std::shared_ptr<UniqueFd> upstream,
                                     std::shared_ptr<void> hold) {
  if (closed_) return;
  if (upgrade_.empty()) {
    return WriteResponse(PlainError(500, "Internal", "an upgrade the request did not ask for"),
                         /*refusal=*/true);
  }
  auto msg = std::make_shared<http::response<http::empty_body>>();
  msg->version(11);
  msg->result(http::status::switching_protocols);
  msg->set(http::field::connection, "Upgrade");
  msg->set(http::field::upgrade, upgrade_);
  for (auto& [k, v] : r.headers) msg->set(k, v);
  auto sr = std::make_shared<http::serializer<false, http::empty_body>>(*msg);
  Lowest().expires_after(limits_.write_timeout);
  http::async_write(stream_, *sr,
                    [self = this->shared_from_this(), msg, sr, upstream,
                     hold = std::move(hold)](error_code ec, size_t) mutable {
                      if (ec) return self->Close(IsTimeout(ec) ? "write_timeout" : nullptr);
                      self->StartRelay(std::move(*upstream), std::move(hold));
                    });
}

// After the 101 the connection carries the client's bytes, not HTTP: what
// was read past the header goes to the upstream first.
template <class Stream>
void Connection<Stream>::StartRelay(UniqueFd upstream, std::shared_ptr<void> hold) {
  if (closed_) return;
  admitted_ = Admitted{};  // the request's budget back; `hold` is the stream's
  head_.reset();
  error_code ec;
  upstream_.emplace(stream_.get_executor());
  upstream_->assign(tcp::v4(), upstream.get(), ec);
  if (ec) return Close(nullptr);
  (void)upstream.release();
  std::string first = beast::buffers_to_string(buffer_.data());
  buffer_.clear();
  buffer_.shrink_to_fit();
  Lowest().expires_never();
  api::RelayLimits limits{limits_.relay_buffer_bytes, limits_.relay_idle_timeout};
  auto self = this->shared_from_this();
  api::Relay<Stream, tcp::socket>::Start(
      stream_, *upstream_, std::move(first), limits,
      std::make_shared<std::pair<std::shared_ptr<Connection>, std::shared_ptr<void>>>(
          self, std::move(hold)),
      [self](const char* reason) { self->Close(reason); });
}

// http_connection.cc instantiates the rest of the class for both streams.
template void Connection<PlainStream>::SwitchProtocols(uint64_t, Response, UniqueFd,
                                                       std::shared_ptr<void>);
template void Connection<TlsStream>::SwitchProtocols(uint64_t, Response, UniqueFd,
                                                     std::shared_ptr<void>);

}  // namespace kubicle::noderuntime::server::connection
