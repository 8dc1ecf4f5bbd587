#include "noderuntime/oci/registry_http.h"

#include <cpprest/http_client.h>
#include <cpprest/streams.h>

#include <algorithm>
#include <boost/asio/ssl.hpp>
#include <memory>
#include <optional>

#include "noderuntime/http/gated_body_buf.h"

namespace kubicle::noderuntime::oci {
namespace {

namespace http = web::http;
using noderuntime::http::Drain;
using noderuntime::http::GatedBodyBuf;
using noderuntime::http::WaitUntil;
namespace streams = concurrency::streams;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkBytes = 256 << 10;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool IsRedirect(int c) { return c == 301 || c == 302 || c == 303 || c == 307 || c == 308; }

struct Hop {
  std::optional<std::string> redirect;
  HttpGetResponse response;
};

// One GET, no redirects followed.
class Fetch {
 public:
  Fetch(const std::string& url, const HttpGetOptions& o, BodySink& sink)
      : url_(url),
        o_(o),
        sink_(sink),
        // Only a 2xx body is let through (Open below); each chunk goes to the
        // sink before the client reads the next.
        buf_(std::make_shared<GatedBodyBuf>(
            o.max_body, [&sink](const uint8_t* p, size_t n) { return sink.Write(p, n); })) {}
  ~Fetch() {
    buf_->Discard();
    if (sent_) {
      cts_.cancel();
      Drain(*sent_);
    }
    if (body_) Drain(*body_);
  }

  Result<Hop> Run(const HttpHeaders& headers) {
    auto remaining = std::chrono::duration_cast<std::chrono::seconds>(o_.deadline - Clock::now());
    http::client::http_client_config cfg;
    cfg.set_max_redirects(0);
    cfg.set_timeout(std::max(remaining, std::chrono::seconds(0)) + std::chrono::seconds(5));
    cfg.set_chunksize(kChunkBytes);
    if (!o_.ca_file.empty()) {
      std::string ca = o_.ca_file;
      cfg.set_ssl_context_callback([ca](boost::asio::ssl::context& ctx) {
        boost::system::error_code ec;
        ctx.load_verify_file(ca, ec);  // checked readable by the caller; a failure only trusts less
      });
    }
    web::uri uri(url_);
    http::client::http_client client(uri, cfg);
    http::http_request req(http::methods::GET);
    req.headers().add(U("User-Agent"), U("kubicle-node"));
    for (const auto& [k, v] : headers) req.headers().add(k, v);
    req.set_response_stream(streams::ostream(streams::streambuf<uint8_t>(buf_)));

    sent_ = client.request(req, cts_.get_token());
    if (!WaitUntil(*sent_, o_.deadline)) return Timeout("waiting for the response");
    http::http_response resp;
    try {
      resp = sent_->get();
    } catch (const std::exception& e) {
      if (Clock::now() >= o_.deadline) return Timeout("waiting for the response");
      return Status::Unavailable("GET " + url_ + ": " + e.what());
    }
    body_ = resp.content_ready();
    Hop hop;
    HttpGetResponse& r = hop.response;
    r.status = resp.status_code();
    r.reason = resp.reason_phrase();
    r.final_url = url_;
    for (const auto& [k, v] : resp.headers()) r.headers[Lower(k)] = v.substr(0, 8192);
    if (IsRedirect(r.status)) {
      auto loc = r.headers.find("location");
      if (loc == r.headers.end())
        return Status::Unavailable("GET " + url_ + ": HTTP " + std::to_string(r.status) +
                                   " without a Location");
      hop.redirect = uri.resolve_uri(loc->second);
      return hop;
    }
    if (r.status != 200 && r.status != 206) return hop;  // body dropped by ~Fetch

    uint64_t total = 0;
    const bool sized = resp.headers().match(http::header_names::content_length, total);
    if (sized && total > o_.max_body) {
      return Status::ResourceExhausted("GET " + url_ + ": the body is " + std::to_string(total) +
                                       " bytes, more than the limit of " +
                                       std::to_string(o_.max_body) + " bytes");
    }
    RETURN_IF_ERROR(sink_.Begin(r.status, r.headers));
    buf_->Open();
    if (!WaitUntil(*body_, o_.deadline)) return Timeout("reading the body");
    try {
      body_->get();
    } catch (const std::exception& e) {
      if (auto err = buf_->error()) return err->WithContext("GET " + url_);
      if (Clock::now() >= o_.deadline) return Timeout("reading the body");
      return Status::Unavailable("GET " + url_ + ": reading the body: " + e.what());
    }
    if (sized && buf_->bytes() != total) {
      return Status::Unavailable("GET " + url_ + ": the body ended after " +
                                 std::to_string(buf_->bytes()) + " of " + std::to_string(total) +
                                 " bytes");
    }
    r.body_bytes = buf_->bytes();
    return hop;
  }

 private:
  Status Timeout(const std::string& what) {
    return Status::DeadlineExceeded("GET " + url_ + ": timeout reached while " + what);
  }

  const std::string url_;
  const HttpGetOptions o_;
  BodySink& sink_;
  std::shared_ptr<GatedBodyBuf> buf_;
  pplx::cancellation_token_source cts_;
  std::optional<pplx::task<http::http_response>> sent_;
  std::optional<pplx::task<http::http_response>> body_;
};

}  // namespace

std::string UrlOrigin(const std::string& url) {
  size_t p = url.find("://");
  if (p == std::string::npos) return Lower(url);
  size_t end = url.find_first_of("/?#", p + 3);
  return Lower(url.substr(0, end));
}

Status CheckRedirect(const std::string& from, const std::string& to) {
  std::string to_scheme = Lower(to.substr(0, to.find(':')));
  if (to_scheme != "http" && to_scheme != "https")
    return Status::Unavailable("GET " + from + ": redirect to unsupported URL " +
                               to.substr(0, 300));
  if (Lower(from.substr(0, 6)) == "https:" && to_scheme == "http")
    return Status::Unavailable("GET " + from + ": refusing a redirect from https to http (" +
                               to.substr(0, 300) + ")");
  return Status::Ok();
}

Result<HttpGetResponse> HttpGet(const std::string& url, const HttpHeaders& headers,
                                const HttpGetOptions& options, BodySink& sink) {
  const std::string origin = UrlOrigin(url);
  std::string current = url;
  for (int hops = 0;; ++hops) {
    HttpHeaders sent;
    for (const auto& h : headers) {
      if (Lower(h.first) == "authorization" && UrlOrigin(current) != origin) continue;
      sent.push_back(h);
    }
    Result<Hop> hop = Status::Internal("unreachable");
    try {
      hop = Fetch(current, options, sink).Run(sent);
    } catch (const std::exception& e) {
      return Status::InvalidArgument("GET " + current + ": " + e.what());
    }
    if (!hop.ok()) return hop.status();
    if (!hop->redirect) return std::move(hop->response);
    if (hops == options.max_redirects)
      return Status::Unavailable("GET " + url + ": more than " +
                                 std::to_string(options.max_redirects) + " redirects");
    RETURN_IF_ERROR(CheckRedirect(current, *hop->redirect));
    current = *hop->redirect;
  }
}

}  // namespace kubicle::noderuntime::oci
