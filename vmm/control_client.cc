#include "vmm/control_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"

namespace kubicle::vmm::control {
namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left until deadline for poll(2), rounded up so a last
// sub-millisecond wait is not a busy loop; 0 once it has passed.
int MillisLeft(Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

// Waits for events on fd until deadline: true when ready, false on timeout.
Result<bool> WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, MillisLeft(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return Status::FromErrno("poll control socket");
  }
}

}  // namespace

Result<std::string> ControlClient::RoundTrip(std::string_view line, Timeout timeout,
                                             std::string_view what) const {
  const auto deadline = Clock::now() + timeout;
  const std::string name(what);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path))
    return Status::InvalidArgument("control socket path too long: " + path_);
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return Status::FromErrno("socket");
  // A Unix connect completes at once or fails (EAGAIN: the listen backlog is
  // full); it never waits.
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0)
    return Status::Unavailable("connect " + path_ + ": " + std::strerror(errno));

  std::string out(line);
  out += '\n';
  size_t sent = 0;
  while (sent < out.size()) {
    ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::Unavailable("send to " + path_ + ": " + std::strerror(errno));
    ASSIGN_OR_RETURN(bool ready, WaitFor(fd.get(), POLLOUT, deadline));
    if (!ready) return Status::DeadlineExceeded("control " + name + ": could not send in time");
  }

  std::string reply;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      const size_t before = reply.size();
      reply.append(buf, static_cast<size_t>(n));
      size_t nl = reply.find('\n', before);
      if (nl != std::string::npos) {
        if (nl > kMaxReplyBytes) break;
        reply.resize(nl);
        return reply;
      }
      if (reply.size() > kMaxReplyBytes) break;
      continue;
    }
    if (n == 0) return Status::Unavailable("control socket closed before a response");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::Unavailable("read from " + path_ + ": " + std::strerror(errno));
    ASSIGN_OR_RETURN(bool ready, WaitFor(fd.get(), POLLIN, deadline));
    if (!ready) return Status::DeadlineExceeded("control " + name + ": no answer in time");
  }
  return Status::DataLoss("control " + name + ": reply longer than " +
                          std::to_string(kMaxReplyBytes) + " bytes");
}

}  // namespace kubicle::vmm::control
