#include "noderuntime/http/get_exchange.h"

#include <cpprest/streams.h>

#include <algorithm>
#include <boost/asio/ssl.hpp>

namespace kubicle::noderuntime::http {
namespace {

namespace web_http = web::http;
namespace streams = concurrency::streams;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkBytes = 256 << 10;

}  // namespace

GetExchange::GetExchange(std::string url, Clock::time_point deadline,
                         std::shared_ptr<GatedBodyBuf> buf, std::string timeout_words)
    : url_(std::move(url)),
      deadline_(deadline),
      buf_(std::move(buf)),
      timeout_words_(std::move(timeout_words)) {}

GetExchange::~GetExchange() {
  buf_->Discard();
  if (sent_) {
    cts_.cancel();
    Drain(*sent_);
  }
  if (body_) Drain(*body_);
}

Result<web_http::http_response> GetExchange::Send(const Headers& headers,
                                                  const std::string& ca_file) {
  auto remaining = std::chrono::duration_cast<std::chrono::seconds>(deadline_ - Clock::now());
  web_http::client::http_client_config cfg;
  cfg.set_max_redirects(0);  // cpprestsdk would send a redirect's body elsewhere
  // cpprestsdk's own timeout (idle time between reads) only backs up the
  // deadline enforced here, so it never fires first.
  cfg.set_timeout(std::max(remaining, std::chrono::seconds(0)) + std::chrono::seconds(5));
  cfg.set_chunksize(kChunkBytes);
  if (!ca_file.empty()) {
    cfg.set_ssl_context_callback([ca = ca_file](boost::asio::ssl::context& ctx) {
      boost::system::error_code ec;
      ctx.load_verify_file(ca, ec);  // checked readable by the caller; a failure only trusts less
    });
  }
  uri_.emplace(url_);
  client_.emplace(*uri_, cfg);
  web_http::http_request req(web_http::methods::GET);
  req.headers().add(U("User-Agent"), U("kubicle-node"));
  for (const auto& [k, v] : headers) req.headers().add(k, v);
  req.set_response_stream(streams::ostream(streams::streambuf<uint8_t>(buf_)));

  sent_ = client_->request(req, cts_.get_token());
  if (!WaitUntil(*sent_, deadline_)) return Timeout("waiting for the response");
  web_http::http_response resp;
  try {
    resp = sent_->get();
  } catch (const std::exception& e) {
    if (Clock::now() >= deadline_) return Timeout("waiting for the response");
    return Status::Unavailable("GET " + url_ + ": " + e.what());
  }
  body_ = resp.content_ready();
  return resp;
}

Result<std::optional<uint64_t>> GetExchange::CheckLength(const web_http::http_response& resp,
                                                         uint64_t max_bytes) const {
  uint64_t total = 0;
  if (!resp.headers().match(web_http::header_names::content_length, total)) {
    return std::optional<uint64_t>();
  }
  if (total > max_bytes) {
    return Status::ResourceExhausted("GET " + url_ + ": the body is " + std::to_string(total) +
                                     " bytes, more than the limit of " + std::to_string(max_bytes) +
                                     " bytes");
  }
  return std::optional<uint64_t>(total);
}

Status GetExchange::ReceiveBody(std::optional<uint64_t> length) {
  buf_->Open();
  if (!WaitUntil(*body_, deadline_)) return Timeout("reading the body");
  try {
    body_->get();
  } catch (const std::exception& e) {
    if (auto err = buf_->error()) return err->WithContext("GET " + url_);
    if (Clock::now() >= deadline_) return Timeout("reading the body");
    return Status::Unavailable("GET " + url_ + ": reading the body: " + e.what());
  }
  if (length && buf_->bytes() != *length) {
    return Status::Unavailable("GET " + url_ + ": the body ended after " +
                               std::to_string(buf_->bytes()) + " of " + std::to_string(*length) +
                               " bytes");
  }
  return Status::Ok();
}

Status GetExchange::Timeout(const std::string& what) const {
  return Status::DeadlineExceeded("GET " + url_ + ": " + timeout_words_ + " " + what);
}

}  // namespace kubicle::noderuntime::http
