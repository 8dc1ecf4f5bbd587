#include "common/event_loop.h"

#include <sys/epoll.h>

namespace kubicle {

Result<std::unique_ptr<EventLoop>> EventLoop::Create() {
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return Status::FromErrno("epoll_create1");
  UniqueFd epoll(ep);
  ASSIGN_OR_RETURN(EventFd wake, EventFd::Create());
  std::unique_ptr<EventLoop> loop(new EventLoop(std::move(epoll), std::move(wake)));
  int wake_fd = loop->wake_.fd();
  EventLoop* raw = loop.get();
  RETURN_IF_ERROR(loop->Add(wake_fd, [raw](uint32_t) { (void)raw->wake_.Consume(); }));
  return loop;
}

Status EventLoop::Add(int fd, Handler handler, uint32_t extra_events) {
  epoll_event ev{};
  ev.events = EPOLLIN | extra_events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) return Status::FromErrno("epoll_ctl add");
  handlers_[fd] = std::make_shared<Handler>(std::move(handler));
  return Status::Ok();
}

Status EventLoop::Remove(int fd) {
  handlers_.erase(fd);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr) < 0) return Status::FromErrno("epoll_ctl del");
  return Status::Ok();
}

Status EventLoop::RunOnce(int timeout_ms) {
  epoll_event events[32];
  int n = ::epoll_wait(epoll_.get(), events, 32, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return Status::Ok();
    return Status::FromErrno("epoll_wait");
  }
  for (int i = 0; i < n; ++i) {
    auto it = handlers_.find(events[i].data.fd);
    if (it == handlers_.end()) continue;  // removed by an earlier handler this round
    std::shared_ptr<Handler> h = it->second;
    (*h)(events[i].events);
  }
  return Status::Ok();
}

Status EventLoop::Run() {
  while (!stop_) RETURN_IF_ERROR(RunOnce(-1));
  return Status::Ok();
}

void EventLoop::Stop() {
  stop_ = true;
  (void)wake_.Signal();
}

}  // namespace kubicle
