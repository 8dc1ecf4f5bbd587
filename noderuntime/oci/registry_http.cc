#include "noderuntime/oci/registry_http.h"

#include <cpprest/http_client.h>
#include <cpprest/streams.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "noderuntime/http/gated_body_buf.h"
#include "noderuntime/http/get_exchange.h"

namespace kubicle::noderuntime::oci {
namespace {

namespace http = web::http;
using noderuntime::http::GatedBodyBuf;
using noderuntime::http::GetExchange;

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
Result<Hop> Fetch(const std::string& url, const HttpHeaders& headers, const HttpGetOptions& o,
                  BodySink& sink) {
  // Only a 2xx body is let through (ReceiveBody); each chunk goes to the
  // sink before the client reads the next.
  auto buf = std::make_shared<GatedBodyBuf>(
      o.max_body, [&sink](const uint8_t* p, size_t n) { return sink.Write(p, n); });
  GetExchange get(url, o.deadline, buf, "timeout reached while");
  ASSIGN_OR_RETURN(http::http_response resp, get.Send(headers, o.ca_file));
  Hop hop;
  HttpGetResponse& r = hop.response;
  r.status = resp.status_code();
  r.reason = resp.reason_phrase();
  r.final_url = url;
  for (const auto& [k, v] : resp.headers()) r.headers[Lower(k)] = v.substr(0, 8192);
  if (IsRedirect(r.status)) {
    auto loc = r.headers.find("location");
    if (loc == r.headers.end())
      return Status::Unavailable("GET " + url + ": HTTP " + std::to_string(r.status) +
                                 " without a Location");
    hop.redirect = get.uri().resolve_uri(loc->second);
    return hop;
  }
  if (r.status != 200 && r.status != 206) return hop;  // body dropped by ~GetExchange

  ASSIGN_OR_RETURN(std::optional<uint64_t> length, get.CheckLength(resp, o.max_body));
  RETURN_IF_ERROR(sink.Begin(r.status, r.headers));
  RETURN_IF_ERROR(get.ReceiveBody(length));
  r.body_bytes = buf->bytes();
  return hop;
}

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
      hop = Fetch(current, sent, options, sink);
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
