// GetExchange: one http(s) GET over cpprestsdk, no redirect followed, its
// body through a GatedBodyBuf: the part nodeagent's HttpDownload and oci's
// HttpGet share. The caller decides what a status means (redirect, error,
// body) between Send() and ReceiveBody(); nothing here follows redirects.
//
// Contracts:
// - Send() waits for the status line until the deadline: DeadlineExceeded
//   "GET <url>: <timeout_words> waiting for the response"; a refused
//   connection, a reset, a TLS failure: Unavailable "GET <url>: <error>". A
//   malformed URL throws (web::uri_exception, std::invalid_argument): the
//   caller's adapter turns it into a Status.
// - CheckLength(): a Content-Length over `max_bytes` is ResourceExhausted
//   before any byte is read; returns the length when there is one.
// - ReceiveBody() opens the buffer and waits for the body until the
//   deadline: the buffer's error (the limit, the sink's) with "GET <url>"
//   as context, DeadlineExceeded, Unavailable when the transfer fails or
//   ends short of the Content-Length ("the body ended after N of M bytes").
// - The destructor discards a body not received, cancels the request and
//   waits for cpprestsdk's tasks: none runs after it.
#pragma once

#include <cpprest/http_client.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "noderuntime/http/gated_body_buf.h"

namespace kubicle::noderuntime::http {

class GetExchange {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  // `timeout_words` begins a timeout's message after the URL ("timeout
  // reached while").
  GetExchange(std::string url, std::chrono::steady_clock::time_point deadline,
              std::shared_ptr<GatedBodyBuf> buf, std::string timeout_words);
  ~GetExchange();
  GetExchange(const GetExchange&) = delete;
  GetExchange& operator=(const GetExchange&) = delete;

  // `ca_file`: an extra trusted CA (PEM), or empty.
  Result<web::http::http_response> Send(const Headers& headers, const std::string& ca_file);
  Result<std::optional<uint64_t>> CheckLength(const web::http::http_response& resp,
                                              uint64_t max_bytes) const;
  Status ReceiveBody(std::optional<uint64_t> length);

  const std::string& url() const { return url_; }
  // The URL a relative Location resolves against; valid after Send().
  const web::uri& uri() const { return *uri_; }

 private:
  Status Timeout(const std::string& what) const;

  const std::string url_;
  const std::chrono::steady_clock::time_point deadline_;
  const std::shared_ptr<GatedBodyBuf> buf_;
  const std::string timeout_words_;
  std::optional<web::uri> uri_;
  std::optional<web::http::client::http_client> client_;
  pplx::cancellation_token_source cts_;
  std::optional<pplx::task<web::http::http_response>> sent_;
  std::optional<pplx::task<web::http::http_response>> body_;
};

}  // namespace kubicle::noderuntime::http
