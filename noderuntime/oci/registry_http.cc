#include "noderuntime/oci/registry_http.h"

#include <cpprest/astreambuf.h>
#include <cpprest/http_client.h>
#include <cpprest/streams.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ssl.hpp>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace kubicle::noderuntime::oci {
namespace {

namespace http = web::http;
namespace streams = concurrency::streams;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkBytes = 256 << 10;

// The response stream cpprestsdk writes into. Writes wait behind a gate
// until the status line is seen: Open() passes a 2xx body to the BodySink,
// Discard() drops any other body unwritten. Each chunk reaches the sink
// before its write task completes, which makes the client wait (bounded
// memory). Same shape as nodeagent/http_download.cc's FdSink.
class GateBuf : public streams::details::streambuf_state_manager<uint8_t> {
  using Base = streams::details::streambuf_state_manager<uint8_t>;

 public:
  GateBuf(BodySink& sink, uint64_t max) : Base(std::ios_base::out), sink_(sink), max_(max) {}
  void Open() { gate_.set(true); }
  void Discard() { gate_.set(false); }
  uint64_t bytes() const { return bytes_; }
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
    auto self = std::static_pointer_cast<GateBuf>(shared_from_this());
    return pplx::create_task(gate_).then([self, ptr, count](bool keep) -> size_t {
      if (keep) self->Write(ptr, count);
      return count;
    });
  }
  pplx::task<int_type> _putc(uint8_t ch) override {
    auto self = std::static_pointer_cast<GateBuf>(shared_from_this());
    return pplx::create_task(gate_).then([self, ch](bool keep) -> int_type {
      if (keep) self->Write(&ch, 1);
      return ch;
    });
  }
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

  // On a cpprestsdk thread; throwing fails the transfer.
  void Write(const uint8_t* p, size_t n) {
    std::lock_guard<std::mutex> l(mu_);
    if (error_) throw std::runtime_error(error_->message());
    if (bytes_ + n > max_) {
      error_ = Status::ResourceExhausted("the body is more than the limit of " +
                                         std::to_string(max_) + " bytes");
      throw std::runtime_error(error_->message());
    }
    Status s = sink_.Write(p, n);
    if (!s.ok()) {
      error_ = s;
      throw std::runtime_error(s.message());
    }
    bytes_ += n;
  }

  BodySink& sink_;
  const uint64_t max_;
  pplx::task_completion_event<bool> gate_;
  mutable std::mutex mu_;
  std::atomic<uint64_t> bytes_{0};
  std::optional<Status> error_;
};

template <typename T>
bool WaitUntil(const pplx::task<T>& t, Clock::time_point deadline) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  t.then([done](pplx::task<T>) { done->set_value(); });
  return f.wait_until(deadline) == std::future_status::ready;
}

template <typename T>
void Drain(const pplx::task<T>& t) {
  try {
    t.get();
  } catch (...) {
  }
}

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
      : url_(url), o_(o), sink_(sink), buf_(std::make_shared<GateBuf>(sink, o.max_body)) {}
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
  std::shared_ptr<GateBuf> buf_;
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
