#include "noderuntime/network/netns_connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace kubicle::noderuntime::network {
namespace {

std::string Where(const std::string& ipv4, uint16_t port) {
  return ipv4 + ":" + std::to_string(port);
}

// Waits for a non-blocking connect to finish; the socket's own error.
Status AwaitConnect(int fd, const std::string& where, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLOUT, 0};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Status::DeadlineExceeded("connecting to " + where + ": no answer within " +
                                      std::to_string(timeout.count()) + " ms");
    }
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("poll on a connect to " + where);
    if (n > 0) break;
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    return Status::FromErrno("SO_ERROR of a connect to " + where);
  }
  if (err == 0) return Status::Ok();
  // Nothing listens, or nothing answers ARP: either way the guest's port
  // is not reachable now, which a retry may change.
  if (err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH) {
    return Status(StatusCode::kUnavailable, "connecting to " + where + ": " + std::strerror(err),
                  err);
  }
  return Status::FromErrno("connecting to " + where, err);
}

}  // namespace

Result<UniqueFd> ConnectTcp(const std::string& ipv4, uint16_t port,
                            std::chrono::milliseconds timeout) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (port == 0 || ::inet_pton(AF_INET, ipv4.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("not an IPv4 address and port: " + Where(ipv4, port));
  }
  const std::string where = Where(ipv4, port);
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Status::FromErrno("socket for " + where);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) {
      return Status(errno == ECONNREFUSED ? StatusCode::kUnavailable : StatusCode::kInternal,
                    "connecting to " + where + ": " + std::strerror(errno), errno);
    }
    RETURN_IF_ERROR(AwaitConnect(fd.get(), where, timeout));
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return Status::FromErrno("making the socket to " + where + " blocking");
  }
  // Interactive traffic (a dev server, a shell) must not wait for Nagle.
  int one = 1;
  (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

Result<UniqueFd> ConnectInNetns(const std::string& netns_path, const std::string& ipv4,
                                uint16_t port, std::chrono::milliseconds timeout) {
  UniqueFd ns(::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return Status::FromErrno("opening network namespace " + netns_path);
  Result<UniqueFd> out = Status::Internal("the connect thread did not run");
  // setns() moves only the calling thread, and a thread that has moved
  // must never serve anything else: this one connects and ends.
  std::thread worker([&] {
    if (::setns(ns.get(), CLONE_NEWNET) != 0) {
      out = Status::FromErrno("entering network namespace " + netns_path);
      return;
    }
    out = ConnectTcp(ipv4, port, timeout);
  });
  worker.join();
  return out;
}

}  // namespace kubicle::noderuntime::network
