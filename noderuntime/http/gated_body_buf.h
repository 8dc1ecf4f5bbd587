// GatedBodyBuf: the response stream cpprestsdk writes an HTTP body into, for
// the GETs that stream a body somewhere (nodeagent's HttpDownload into a
// file, oci's HttpGet into a BodySink). The cpprestsdk adapter's one shared
// part; nothing here knows URLs, redirects or deadlines.
//
// Contracts:
// - Write-only: every read reports end of stream, nothing seeks.
// - Writes are held behind a gate until the caller has seen the status line:
//   Open() lets the body through, Discard() drops it unwritten (a redirect's,
//   a 401's or an error's body). One of them must be called before waiting
//   for the body, or a held write never completes; calling either again
//   does nothing.
// - Each chunk, in the order cpprestsdk wrote them, goes to `on_chunk`
//   before its write task completes, which makes the client wait before
//   reading more (backpressure: memory is one chunk, never the body).
// - A chunk that would take the body past `max_bytes` is refused before
//   `on_chunk` sees it: error() is ResourceExhausted ("the body is more than
//   the limit of N bytes"). A non-OK status from `on_chunk` is kept as
//   error(). Either way the write throws, which is how a cpprestsdk thread
//   fails the transfer; later writes throw the same error.
// - `on_chunk` runs on a cpprestsdk thread, one chunk at a time, under the
//   buffer's lock: it must not call error().
// - Owned by a std::shared_ptr (cpprestsdk's streambuf holds one); bytes()
//   and error() are final once the body's task has completed.
#pragma once

#include <cpprest/astreambuf.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>

#include "common/status.h"

namespace kubicle::noderuntime::http {

using ChunkFn = std::function<Status(const uint8_t* data, size_t n)>;

class GatedBodyBuf : public concurrency::streams::details::streambuf_state_manager<uint8_t> {
  using Base = concurrency::streams::details::streambuf_state_manager<uint8_t>;

 public:
  GatedBodyBuf(uint64_t max_bytes, ChunkFn on_chunk);

  void Open() { gate_.set(true); }
  void Discard() { gate_.set(false); }

  // Bytes accepted by `on_chunk` so far.
  uint64_t bytes() const { return bytes_; }
  std::optional<Status> error() const;

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
  bool acquire(uint8_t*& ptr, size_t& count) override;
  void release(uint8_t*, size_t) override {}

 protected:
  using Base::_putn;
  pplx::task<size_t> _putn(const uint8_t* ptr, size_t count) override;
  pplx::task<int_type> _putc(uint8_t ch) override;
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
  void Write(const uint8_t* p, size_t n);

  const uint64_t max_bytes_;
  const ChunkFn on_chunk_;
  pplx::task_completion_event<bool> gate_;
  mutable std::mutex mu_;
  std::atomic<uint64_t> bytes_{0};
  std::optional<Status> error_;
};

// Waits for `t` without consuming its result; false when `deadline` passed.
template <typename T>
bool WaitUntil(const pplx::task<T>& t, std::chrono::steady_clock::time_point deadline) {
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

}  // namespace kubicle::noderuntime::http
