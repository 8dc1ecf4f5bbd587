// RegistryHttp: one GET with headers, for the registry client, over
// cpprestsdk (the cpprestsdk adapter: nothing it throws escapes). Like
// nodeagent/http_download.h, but the caller names request headers, sees the
// response's status and headers, and chooses where a 2xx body goes.
//
// Contracts:
// - Only a 200 or 206 body reaches `sink`, chunk by chunk as it arrives (a
//   redirect's, a 401's or an error's body is dropped unread); the next
//   chunk is read only after `sink` returned, so memory is one chunk.
// - More than `max_body` bytes of body: ResourceExhausted, immediately when
//   Content-Length says so, else as soon as the running count passes it. A
//   sink's error ends the transfer with that error.
// - A body shorter than its Content-Length: Unavailable ("ended after").
// - `deadline` bounds the whole call: DeadlineExceeded.
// - Redirects (301, 302, 303, 307, 308) are followed at most `max_redirects`
//   times, http(s) only, never https -> http; an Authorization header is sent
//   only to the host it was meant for (a registry redirects blobs to
//   storage that has its own signed URL).
// - https verifies the peer against the system CAs plus `ca_file` if set.
// - A refused connection, a reset, a TLS failure: Unavailable naming the URL.
//   Any status is returned as a response (the caller decides); only
//   transport failures are errors.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime::oci {

struct HttpGetOptions {
  std::chrono::steady_clock::time_point deadline;
  uint64_t max_body = 0;
  int max_redirects = 5;
  std::string ca_file;  // extra trusted CA (PEM), or empty
};

struct HttpGetResponse {
  int status = 0;
  std::string reason;
  std::map<std::string, std::string> headers;  // lowercase names
  uint64_t body_bytes = 0;                     // written to the sink
  std::string final_url;
  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// Receives a 200/206 body. `total` (Content-Length, 0 when absent) is given
// once before the first chunk. Runs on a cpprestsdk thread.
struct BodySink {
  virtual ~BodySink() = default;
  virtual Status Begin(int status, const std::map<std::string, std::string>& headers) = 0;
  virtual Status Write(const uint8_t* data, size_t n) = 0;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

[[nodiscard]] Result<HttpGetResponse> HttpGet(const std::string& url, const HttpHeaders& headers,
                                              const HttpGetOptions& options, BodySink& sink);

// "scheme://host[:port]" of a URL, lowercased: whom an Authorization header
// is for (only requests to the same origin carry it).
std::string UrlOrigin(const std::string& url);

// OK when a GET of `from` may follow a redirect to `to`: http or https only,
// never from https to http (Unavailable otherwise).
[[nodiscard]] Status CheckRedirect(const std::string& from, const std::string& to);

// A sink that keeps the body in memory (for manifests, configs, tokens,
// whose size the caller caps through max_body).
class StringSink : public BodySink {
 public:
  Status Begin(int, const std::map<std::string, std::string>&) override {
    body_.clear();
    return Status::Ok();
  }
  Status Write(const uint8_t* data, size_t n) override {
    body_.append(reinterpret_cast<const char*>(data), n);
    return Status::Ok();
  }
  const std::string& body() const { return body_; }

 private:
  std::string body_;
};

}  // namespace kubicle::noderuntime::oci
