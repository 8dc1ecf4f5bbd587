#include "common/event_fd.h"

#include <sys/eventfd.h>
#include <unistd.h>

namespace kubicle {

Result<EventFd> EventFd::Create(unsigned initial) {
  int fd = ::eventfd(initial, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno("eventfd");
  return EventFd(UniqueFd(fd));
}

Status EventFd::Signal(uint64_t n) const {
  if (::write(fd_.get(), &n, sizeof(n)) != sizeof(n)) return Status::FromErrno("eventfd write");
  return Status::Ok();
}

Result<uint64_t> EventFd::Consume() const {
  uint64_t v = 0;
  ssize_t r = ::read(fd_.get(), &v, sizeof(v));
  if (r == sizeof(v)) return v;
  if (r < 0 && errno == EAGAIN) return uint64_t{0};
  return Status::FromErrno("eventfd read");
}

}  // namespace kubicle
