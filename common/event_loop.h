// EventLoop: a single-threaded epoll loop that calls a handler when an fd is
// readable (or hung up). Used by kubicle-vmm's device thread and by servers.
//
// Add/Remove may be called from handlers. Stop() may be called from any
// thread and makes Run() return after the current iteration.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>

#include "common/event_fd.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle {

class EventLoop {
 public:
  // events: the epoll events seen (EPOLLIN, EPOLLHUP, ...).
  using Handler = std::function<void(uint32_t events)>;

  static Result<std::unique_ptr<EventLoop>> Create();

  // Watches fd for EPOLLIN (plus any extra events). The fd stays owned by the caller
  // and must be Removed before it is closed.
  Status Add(int fd, Handler handler, uint32_t extra_events = 0);
  Status Remove(int fd);
  // Runs until Stop(). Returns an error only if epoll itself fails.
  Status Run();
  // Runs one iteration with the given timeout in ms (-1 blocks).
  Status RunOnce(int timeout_ms);
  void Stop();
  bool stopped() const { return stop_; }

 private:
  EventLoop(UniqueFd epoll, EventFd wake) : epoll_(std::move(epoll)), wake_(std::move(wake)) {}
  UniqueFd epoll_;
  EventFd wake_;
  // shared_ptr so a handler that removes itself stays alive until it returns.
  std::map<int, std::shared_ptr<Handler>> handlers_;
  std::atomic<bool> stop_{false};
};

}  // namespace kubicle
