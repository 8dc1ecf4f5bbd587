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

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace http = web::http;
using noderuntime::http::Drain;
using noderuntime::http::GatedBodyBuf;
using noderuntime::http::WaitUntil;
namespace streams = concurrency::streams;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkBytes = 256 << 10;

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
class Fetch {
 public:
  Fetch(const std::string& url, int fd, const DownloadLimits& limits,
        const ByteProgressFn& progress)
      : url_(url),
        limits_(limits),
        writer_(std::make_shared<FdWriter>(fd, progress)),
        sink_(std::make_shared<GatedBodyBuf>(
            limits.max_bytes,
            [w = writer_](const uint8_t* p, size_t n) { return w->Write(p, n); })) {}

  // Never leaves a cpprestsdk task running behind it.
  ~Fetch() {
    sink_->Discard();
    if (sent_) {
      cts_.cancel();
      Drain(*sent_);
    }
    if (body_) Drain(*body_);
  }

  Result<Hop> Run() {
    auto remaining =
        std::chrono::duration_cast<std::chrono::seconds>(limits_.deadline - Clock::now());
    http::client::http_client_config cfg;
    cfg.set_max_redirects(0);  // cpprestsdk would send a redirect's body elsewhere
    // cpprestsdk's own timeout (idle time between reads) only backs up the
    // deadline enforced below, so it never fires first.
    cfg.set_timeout(std::max(remaining, std::chrono::seconds(0)) + std::chrono::seconds(5));
    cfg.set_chunksize(kChunkBytes);
    web::uri uri(url_);
    http::client::http_client client(uri, cfg);
    http::http_request req(http::methods::GET);
    req.headers().add(U("User-Agent"), U("kubicle-node"));
    req.set_response_stream(streams::ostream(streams::streambuf<uint8_t>(sink_)));

    sent_ = client.request(req, cts_.get_token());
    if (!WaitUntil(*sent_, limits_.deadline)) return Timeout("waiting for the response");
    http::http_response resp;
    try {
      resp = sent_->get();
    } catch (const std::exception& e) {
      if (Clock::now() >= limits_.deadline) return Timeout("waiting for the response");
      return Status::Unavailable("GET " + url_ + ": " + e.what());
    }
    body_ = resp.content_ready();

    const http::status_code code = resp.status_code();
    const std::string status_line = "HTTP " + std::to_string(code) + " " + resp.reason_phrase();
    if (IsRedirect(code)) {
      auto loc = resp.headers().find(http::header_names::location);
      if (loc == resp.headers().end())
        return Status::Unavailable("GET " + url_ + ": " + status_line + " without a Location");
      return Hop{uri.resolve_uri(loc->second), {}};
    }
    if (code != http::status_codes::OK)
      return Status::Unavailable("GET " + url_ + ": " + status_line);

    uint64_t total = 0;
    const bool sized = resp.headers().match(http::header_names::content_length, total);
    if (sized && total > limits_.max_bytes) {
      return Status::ResourceExhausted("GET " + url_ + ": the body is " + std::to_string(total) +
                                       " bytes, more than the limit of " +
                                       std::to_string(limits_.max_bytes) + " bytes");
    }
    writer_->set_total(sized ? total : 0);
    sink_->Open();
    if (!WaitUntil(*body_, limits_.deadline)) return Timeout("reading the body");
    try {
      body_->get();
    } catch (const std::exception& e) {
      if (auto err = sink_->error()) return err->WithContext("GET " + url_);
      if (Clock::now() >= limits_.deadline) return Timeout("reading the body");
      return Status::Unavailable("GET " + url_ + ": reading the body: " + e.what());
    }
    if (sized && sink_->bytes() != total) {
      return Status::Unavailable("GET " + url_ + ": the body ended after " +
                                 std::to_string(sink_->bytes()) + " of " + std::to_string(total) +
                                 " bytes");
    }
    return Hop{std::nullopt, {sink_->bytes(), writer_->HexDigest(), url_}};
  }

 private:
  Status Timeout(const std::string& what) {
    return Status::DeadlineExceeded("GET " + url_ + ": download timeout reached while " + what);
  }

  const std::string url_;
  const DownloadLimits limits_;
  std::shared_ptr<FdWriter> writer_;
  std::shared_ptr<GatedBodyBuf> sink_;
  pplx::cancellation_token_source cts_;
  std::optional<pplx::task<http::http_response>> sent_;
  std::optional<pplx::task<http::http_response>> body_;
};

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
      hop = Fetch(current, fd, limits, progress).Run();
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
