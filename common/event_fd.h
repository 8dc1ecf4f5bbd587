// EventFd: an owned eventfd(2), used for irqfd/ioeventfd and thread wakeups.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle {

class EventFd {
 public:
  // Non-blocking, close-on-exec.
  static Result<EventFd> Create(unsigned initial = 0);

  // Adds n to the counter. Never blocks in practice (counter overflow is the
  // only EAGAIN case and means 2^64 unread signals).
  Status Signal(uint64_t n = 1) const;
  // Reads and clears the counter; returns 0 when nothing was pending.
  Result<uint64_t> Consume() const;
  int fd() const { return fd_.get(); }

 private:
  explicit EventFd(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace kubicle
