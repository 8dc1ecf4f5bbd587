#include "guest/agent/loop.h"

#include <cerrno>

namespace kubicle::guest::agent {

Result<Loop> Loop::Create() {
  Loop loop;
  loop.epfd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!loop.epfd_) return Status::FromErrno("epoll_create1");
  return loop;
}

Result<Loop::Token> Loop::Watch(int fd, uint32_t events, Handler handler) {
  const Token token = next_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) return Status::FromErrno("epoll_ctl add");
  watches_.emplace(token, Watch_{fd, events, std::move(handler)});
  return token;
}

void Loop::Modify(Token token, uint32_t events) {
  auto it = watches_.find(token);
  if (it == watches_.end() || it->second.events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_MOD, it->second.fd, &ev) == 0) it->second.events = events;
}

void Loop::Unwatch(Token token) {
  auto it = watches_.find(token);
  if (it == watches_.end()) return;
  ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
  // The handler may be the one running now: destroy it after the batch.
  deferred_.push_back([h = std::move(it->second.handler)] {});
  watches_.erase(it);
}

Loop::Token Loop::AddTimer(SteadyClock::time_point when, std::function<void()> fn) {
  const Token token = next_++;
  timer_order_.emplace(when, token);
  timers_.emplace(token, std::make_pair(when, std::move(fn)));
  return token;
}

void Loop::CancelTimer(Token token) {
  auto it = timers_.find(token);
  if (it == timers_.end()) return;
  auto range = timer_order_.equal_range(it->second.first);
  for (auto o = range.first; o != range.second; ++o) {
    if (o->second == token) {
      timer_order_.erase(o);
      break;
    }
  }
  timers_.erase(it);
}

void Loop::Defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }

void Loop::RunOnce(std::chrono::milliseconds max_wait) {
  auto wait = max_wait;
  if (!deferred_.empty()) wait = std::chrono::milliseconds(0);
  if (!timer_order_.empty()) {
    const auto until = std::chrono::ceil<std::chrono::milliseconds>(timer_order_.begin()->first -
                                                                    SteadyClock::now());
    wait = std::max(std::chrono::milliseconds(0), std::min(wait, until));
  }
  epoll_event events[64];
  const int n = ::epoll_wait(epfd_.get(), events, 64, int(wait.count()));
  for (int i = 0; i < n; ++i) {
    auto it = watches_.find(events[i].data.u64);
    if (it == watches_.end()) continue;  // unwatched earlier in this batch
    Handler h = it->second.handler;     // copy: the handler may unwatch itself
    h(events[i].events);
  }
  const auto now = SteadyClock::now();
  while (!timer_order_.empty() && timer_order_.begin()->first <= now) {
    const Token token = timer_order_.begin()->second;
    timer_order_.erase(timer_order_.begin());
    auto it = timers_.find(token);
    if (it == timers_.end()) continue;
    auto fn = std::move(it->second.second);
    timers_.erase(it);
    fn();
  }
  while (!deferred_.empty()) {
    auto work = std::move(deferred_);
    deferred_.clear();
    for (auto& fn : work) fn();
  }
}

void Loop::Run() {
  stop_ = false;
  while (!stop_) RunOnce(std::chrono::milliseconds(60000));
}

}  // namespace kubicle::guest::agent
