// HttpDownload: one http(s) GET streamed into a file descriptor, for the
// image resolver. The cpprestsdk adapter: nothing it throws escapes.
//
// Contracts:
// - `fd` is truncated, then only the final 200 response's body is written to
//   it (a redirect's or an error's body is dropped unwritten), as it
//   arrives: memory use is one cpprestsdk chunk, never the body. The next
//   chunk is read from the socket only after the previous one is on `fd`, so
//   a slow disk slows the transfer instead of buffering it.
// - More than `max_bytes` of body: ResourceExhausted, immediately when the
//   Content-Length says so, else as soon as the running count passes it.
// - `deadline` bounds the whole call (connect, redirects, body):
//   DeadlineExceeded.
// - Redirects (301, 302, 303, 307, 308) are followed at most `max_redirects`
//   times, http and https only, never from https to http.
// - Any other status than 200, a refused connection, a reset or a DNS
//   failure: Unavailable, naming the URL and the status line or the error.
// - `progress(bytes, total)` runs on a cpprestsdk thread after each chunk
//   (total is 0 when the server sent no Content-Length); never after
//   HttpDownload returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace kubicle::noderuntime::nodeagent {

struct DownloadLimits {
  uint64_t max_bytes = 0;
  std::chrono::steady_clock::time_point deadline;
  int max_redirects = 5;
};

struct DownloadResult {
  uint64_t bytes = 0;
  std::string sha256;     // lowercase hex of the body written to fd
  std::string final_url;  // after redirects
};

using ByteProgressFn = std::function<void(uint64_t bytes, uint64_t total)>;

Result<DownloadResult> HttpDownload(const std::string& url, int fd, const DownloadLimits& limits,
                                    const ByteProgressFn& progress);

}  // namespace kubicle::noderuntime::nodeagent
