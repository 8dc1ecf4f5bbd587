#include "noderuntime/nodeagent/http_download.h"

#include <cpprest/http_client.h>
#include <cpprest/streams.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/sha256.h"
#include "noderuntime/http/gated_body_buf.h"
#include "noderuntime/http/get_exchange.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace http = web::http;
using noderuntime::http::GatedBodyBuf;
using noderuntime::http::GetExchange;

// Where a 200 body goes, chunk by chunk (GatedBodyBuf's on_chunk): the fd and
// the hash, then the progress callback. Shared with the buffer's callback,
// which may outlive the Fetch on a cpprestsdk thread.
class FdWriter {
 public:
  FdWriter(int fd, ByteProgressFn progress) : fd_(fd), progress_(std::move(progress)) {}

  void set_total(uint64_t total) { total_ = total; }
  // Valid once the body's task has completed.
  std::string HexDigest() { return hash_.FinalHex(); }

  // Called under GatedBodyBuf's lock, one chunk at a time.
  Status Write(const uint8_t* p, size_t n) {
    for (size_t off = 0; off < n;) {
      ssize_t w = ::write(fd_, p + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Status::FromErrno("writing the download");
      off += static_cast<size_t>(w);
    }
    hash_.Update({p, n});
    bytes_ += n;
    if (progress_) {
      try {
        progress_(bytes_, total_);
      } catch (...) {
        // A broken progress printer is no reason to fail a download.
      }
    }
    return Status::Ok();
  }

 private:
  const int fd_;
  const ByteProgressFn progress_;
  std::atomic<uint64_t> total_{0};
  Sha256 hash_;
  uint64_t bytes_ = 0;
};

bool IsRedirect(http::status_code c) {
  return c == 301 || c == 302 || c == 303 || c == 307 || c == 308;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

struct Hop {
  std::optional<std::string> redirect;  // set: fetch this next
  DownloadResult result;
};

// One GET without following redirects.
Result<Hop> Fetch(const std::string& url, int fd, const DownloadLimits& limits,
                  const ByteProgressFn& progress) {
  auto writer = std::make_shared<FdWriter>(fd, progress);
  auto buf = std::make_shared<GatedBodyBuf>(
      limits.max_bytes, [writer](const uint8_t* p, size_t n) { return writer->Write(p, n); });
  GetExchange get(url, limits.deadline, buf, "download timeout reached while");
  ASSIGN_OR_RETURN(http::http_response resp, get.Send({}, ""));

  const http::status_code code = resp.status_code();
  const std::string status_line = "HTTP " + std::to_string(code) + " " + resp.reason_phrase();
  if (IsRedirect(code)) {
    auto loc = resp.headers().find(http::header_names::location);
    if (loc == resp.headers().end())
      return Status::Unavailable("GET " + url + ": " + status_line + " without a Location");
    return Hop{get.uri().resolve_uri(loc->second), {}};
  }
  if (code != http::status_codes::OK) return Status::Unavailable("GET " + url + ": " + status_line);

  ASSIGN_OR_RETURN(std::optional<uint64_t> length, get.CheckLength(resp, limits.max_bytes));
  writer->set_total(length.value_or(0));
  RETURN_IF_ERROR(get.ReceiveBody(length));
  return Hop{std::nullopt, {buf->bytes(), writer->HexDigest(), url}};
}

Status CheckRedirect(const std::string& from, const std::string& to) {
  std::string to_scheme = Lower(to.substr(0, to.find(':')));
  if (to_scheme != "http" && to_scheme != "https")
    return Status::Unavailable("GET " + from + ": redirect to unsupported URL " + to);
  if (Lower(from.substr(0, 6)) == "https:" && to_scheme == "http")
    return Status::Unavailable("GET " + from + ": refusing a redirect from https to http (" + to +
                               ")");
  return Status::Ok();
}

}  // namespace

Result<DownloadResult> HttpDownload(const std::string& url, int fd, const DownloadLimits& limits,
                                    const ByteProgressFn& progress) {
  if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0)
    return Status::FromErrno("truncating the download file");
  std::string current = url;
  for (int hops = 0;; ++hops) {
    Result<Hop> hop = Status::Internal("unreachable");
    try {
      hop = Fetch(current, fd, limits, progress);
    } catch (const std::exception& e) {
      // web::uri_exception, http_client's invalid_argument for a bad URL.
      return Status::InvalidArgument("GET " + current + ": " + e.what());
    }
    if (!hop.ok()) return hop.status();
    if (!hop->redirect) return std::move(hop->result);
    if (hops == limits.max_redirects) {
      return Status::Unavailable("GET " + url + ": more than " +
                                 std::to_string(limits.max_redirects) + " redirects");
    }
    RETURN_IF_ERROR(CheckRedirect(current, *hop->redirect));
    current = *hop->redirect;
  }
}

}  // namespace kubicle::noderuntime::nodeagent
