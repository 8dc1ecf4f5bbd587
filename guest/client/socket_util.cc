#include "guest/client/socket_util.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

namespace kubicle::guest::client {

Status WaitFd(int fd, short events, Deadline deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) return Status::DeadlineExceeded("deadline exceeded");
    // +1 rounds up so we never spin on a sub-millisecond remainder.
    const int timeout = int(std::min<int64_t>(left.count() + 1, 60 * 1000));
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, timeout);
    if (n > 0) return Status::Ok();
    if (n < 0 && errno != EINTR) return Status::FromErrno("poll");
    if (n == 0 && Clock::now() >= deadline) return Status::DeadlineExceeded("deadline exceeded");
  }
}

Status SendAll(int fd, ByteSpan bytes, Deadline deadline, size_t* written) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += size_t(n);
      if (written != nullptr) *written = done;
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return Status::FromErrno("send");
    RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline));
  }
  return Status::Ok();
}

Result<UniqueFd> ConnectUnixSocket(const std::string& path, Deadline deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("unix socket path empty or too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return Status::FromErrno("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) {
      Status s = Status::FromErrno("connect " + path);
      return Status(StatusCode::kUnavailable, s.message(), s.error_number());
    }
    RETURN_IF_ERROR(WaitFd(fd.get(), POLLOUT, deadline).WithContext("connect " + path));
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Status::FromErrno("connect " + path, err);
  }
  return fd;
}

}  // namespace kubicle::guest::client
