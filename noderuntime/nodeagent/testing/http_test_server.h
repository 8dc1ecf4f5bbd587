// A small HTTP/1.1 server on 127.0.0.1 for the node agent's tests: each
// test scripts the replies per path (status, headers, body, delays, a
// paced body) and counts requests and bytes sent. One request per
// connection (Connection: close), each on its own thread so concurrent
// clients are served concurrently. Test-only; header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/unique_fd.h"

namespace kubicle::noderuntime::nodeagent {

// What the server sends for one request.
struct TestHttpReply {
  int status = 200;
  std::string reason = "OK";
  std::string body;
  bool content_length = true;
  uint64_t stream_bytes = 0;  // > 0: then this many more bytes, no Content-Length
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds delay{0};  // before the status line
  // > 0: the body goes out in pieces of this size, `pace` apart (a slow
  // link, so progress reports have time to show).
  size_t piece_bytes = 0;
  std::chrono::milliseconds pace{0};
};

// HTTP/1.1, one request per connection (Connection: close), each on its own
// thread so concurrent clients are served concurrently.
class TestHttpServer {
 public:
  using Handler = std::function<TestHttpReply(const std::string& path)>;
  // Also sees the request's head (request line and headers, "\r\n"
  // separated), for tests of what a client sends (Range, Authorization).
  using HeadHandler = std::function<TestHttpReply(const std::string& path, const std::string& head)>;

  explicit TestHttpServer(Handler handler)
      : TestHttpServer(HeadHandler([h = std::move(handler)](const std::string& path, const std::string&) {
          return h(path);
        })) {}
  explicit TestHttpServer(HeadHandler handler) : handler_(std::move(handler)) {
    listen_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_.get(), 16) != 0 ||
        ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "test server: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~TestHttpServer() {
    stop_ = true;
    ::shutdown(listen_.get(), SHUT_RDWR);  // wakes accept()
    if (acceptor_.joinable()) acceptor_.join();
    std::lock_guard<std::mutex> l(mu_);
    for (std::thread& t : conns_) t.join();
  }

  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int requests() const { return requests_; }
  uint64_t bytes_sent() const { return sent_; }

 private:
  void AcceptLoop() {
    for (;;) {
      int c = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR && !stop_) continue;
        return;
      }
      std::lock_guard<std::mutex> l(mu_);
      conns_.emplace_back([this, c] { Serve(UniqueFd(c)); });
    }
  }

  void Serve(UniqueFd c) {
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(c.get(), buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, static_cast<size_t>(n));
    }
    size_t sp1 = req.find(' ');
    size_t sp2 = req.find(' ', sp1 + 1);
    ++requests_;
    TestHttpReply r = handler_(req.substr(sp1 + 1, sp2 - sp1 - 1), req.substr(0, req.find("\r\n\r\n")));
    for (auto until = std::chrono::steady_clock::now() + r.delay;
         !stop_ && std::chrono::steady_clock::now() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + r.reason +
                       "\r\nConnection: close\r\n";
    for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
    if (r.content_length && r.stream_bytes == 0)
      head += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    if (!Send(c.get(), head + "\r\n") || !SendBody(c.get(), r)) return;
    const std::string chunk(64 << 10, 'x');
    for (uint64_t n = 0; n < r.stream_bytes && !stop_; n += chunk.size()) {
      if (!Send(c.get(), chunk)) return;
    }
  }

  bool SendBody(int fd, const TestHttpReply& r) {
    if (r.piece_bytes == 0) return Send(fd, r.body);
    for (size_t off = 0; off < r.body.size() && !stop_; off += r.piece_bytes) {
      if (off > 0) std::this_thread::sleep_for(r.pace);
      if (!Send(fd, r.body.substr(off, r.piece_bytes))) return false;
    }
    return true;
  }

  bool Send(int fd, const std::string& data) {
    for (size_t off = 0; off < data.size();) {
      ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
      sent_ += static_cast<uint64_t>(n);
    }
    return true;
  }

  HeadHandler handler_;
  UniqueFd listen_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::atomic<uint64_t> sent_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

}  // namespace kubicle::noderuntime::nodeagent
