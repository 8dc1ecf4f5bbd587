#include "noderuntime/nodeagent/http_download.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>

#include <cpprest/astreambuf.h>
#include <cpprest/http_client.h>
#include <cpprest/streams.h>

#include "common/sha256.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace http = web::http;
namespace streams = concurrency::streams;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkBytes = 256 << 10;

// The response stream cpprestsdk writes the body into: each chunk goes to the
// fd and the hash before the write's task completes, which is what makes the
// client wait before reading more (backpressure, bounded memory).
//
// Writes are held behind a gate until the caller has seen the status line:
// Open() lets a 200 body through, Discard() drops a redirect's or an error's
// body unwritten. One of them must be called before waiting for the body, or
// a held write never completes.
class FdSink : public streams::details::streambuf_state_manager<uint8_t> {
  using Base = streams::details::streambuf_state_manager<uint8_t>;

 public:
  FdSink(int fd, uint64_t max_bytes, ByteProgressFn progress)
      : Base(std::ios_base::out), fd_(fd), max_bytes_(max_bytes), progress_(std::move(progress)) {}

  void Open(uint64_t total) {
    total_ = total;
    gate_.set(true);
  }
  void Discard() { gate_.set(false); }

  // Valid once the body's task has completed.
  uint64_t bytes() const { return bytes_; }
  std::string HexDigest() {
    std::lock_guard<std::mutex> l(mu_);
    return hash_.FinalHex();
  }
  std::optional<Status> error() const {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }

  bool can_seek() const override { return false; }
  bool has_size() const override { return false; }
  size_t buffer_size(std::ios_base::openmode) const override { return 0; }
  void set_buffer_size(size_t, std::ios_base::openmode) override {}
  size_t in_avail() const override { return 0; }
  pos_type getpos(std::ios_base::openmode) const override { return NoPos(); }
  pos_type seekpos(pos_type, std::ios_base::openmode) override { return NoPos(); }
  pos_type seekoff(off_type, std::ios_base::seekdir, std::ios_base::openmode) override {
    return NoPos();
  }
  bool acquire(uint8_t*& ptr, size_t& count) override {
    ptr = nullptr;
    count = 0;
    return false;
  }
  void release(uint8_t*, size_t) override {}

 protected:
  using Base::_putn;
  pplx::task<size_t> _putn(const uint8_t* ptr, size_t count) override {
    auto self = std::static_pointer_cast<FdSink>(shared_from_this());
    // putn_nocopy: cpprestsdk keeps `ptr` valid until this task completes.
    return pplx::create_task(gate_).then([self, ptr, count](bool keep) -> size_t {
      if (keep) self->Write(ptr, count);
      return count;
    });
  }
  pplx::task<int_type> _putc(uint8_t ch) override {
    auto self = std::static_pointer_cast<FdSink>(shared_from_this());
    return pplx::create_task(gate_).then([self, ch](bool keep) -> int_type {
      if (keep) self->Write(&ch, 1);
      return ch;
    });
  }
  // Write-only: every read reports end of stream.
  pplx::task<int_type> _bumpc() override { return pplx::task_from_result<int_type>(Eof()); }
  int_type _sbumpc() override { return Eof(); }
  pplx::task<int_type> _getc() override { return pplx::task_from_result<int_type>(Eof()); }
  int_type _sgetc() override { return Eof(); }
  pplx::task<int_type> _nextc() override { return pplx::task_from_result<int_type>(Eof()); }
  pplx::task<int_type> _ungetc() override { return pplx::task_from_result<int_type>(Eof()); }
  pplx::task<size_t> _getn(uint8_t*, size_t) override { return pplx::task_from_result<size_t>(0); }
  size_t _scopy(uint8_t*, size_t) override { return 0; }
  pplx::task<bool> _sync() override { return pplx::task_from_result(true); }
  uint8_t* _alloc(size_t) override { return nullptr; }
  void _commit(size_t) override {}

 private:
  static int_type Eof() { return traits::eof(); }
  static pos_type NoPos() { return static_cast<pos_type>(traits::eof()); }

  // Runs on a cpprestsdk thread; throwing fails the transfer.
  void Write(const uint8_t* p, size_t n) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (bytes_ + n > max_bytes_) {
        error_ = Status::ResourceExhausted("the body is more than the limit of " +
                                           std::to_string(max_bytes_) + " bytes");
        throw std::runtime_error(error_->message());
      }
      for (size_t off = 0; off < n;) {
        ssize_t w = ::write(fd_, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          error_ = Status::FromErrno("writing the download");
          throw std::runtime_error(error_->message());
        }
        off += static_cast<size_t>(w);
      }
      hash_.Update({p, n});
      bytes_ += n;
    }
    if (progress_) {
      try {
        progress_(bytes_, total_);
      } catch (...) {
        // A broken progress printer is no reason to fail a download.
      }
    }
  }

  const int fd_;
  const uint64_t max_bytes_;
  const ByteProgressFn progress_;
  pplx::task_completion_event<bool> gate_;
  std::atomic<uint64_t> total_{0};
  mutable std::mutex mu_;
  Sha256 hash_;
  std::atomic<uint64_t> bytes_{0};
  std::optional<Status> error_;
};

// Waits for `t` without consuming its result; false when the deadline passed.
template <typename T>
bool WaitUntil(const pplx::task<T>& t, Clock::time_point deadline) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  t.then([done](pplx::task<T>) { done->set_value(); });
  return f.wait_until(deadline) == std::future_status::ready;
}

// Waits for `t` and observes its exception (pplx terminates the process on
// an exception nobody looked at).
template <typename T>
void Drain(const pplx::task<T>& t) {
  try {
    t.get();
  } catch (...) {
  }
}

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
        sink_(std::make_shared<FdSink>(fd, limits.max_bytes, progress)) {}

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
    sink_->Open(sized ? total : 0);
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
    return Hop{std::nullopt, {sink_->bytes(), sink_->HexDigest(), url_}};
  }

 private:
  Status Timeout(const std::string& what) {
    return Status::DeadlineExceeded("GET " + url_ + ": download timeout reached while " + what);
  }

  const std::string url_;
  const DownloadLimits limits_;
  std::shared_ptr<FdSink> sink_;
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
