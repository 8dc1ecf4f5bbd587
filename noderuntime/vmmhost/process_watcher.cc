#include "noderuntime/vmmhost/process_watcher.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>

#include "noderuntime/vmmhost/vmm_process.h"

namespace kubicle::noderuntime {

ProcessWatcher::ProcessWatcher() = default;

ProcessWatcher::~ProcessWatcher() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }
}

Status ProcessWatcher::Start() {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return Status::FromErrno("epoll_create1");
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) return Status::FromErrno("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0)
    return Status::FromErrno("epoll_ctl");
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

Result<uint64_t> ProcessWatcher::Watch(int pidfd, OnExit on_exit) {
  UniqueFd dup(::fcntl(pidfd, F_DUPFD_CLOEXEC, 3));
  if (!dup) return Status::FromErrno("dup pidfd");
  std::lock_guard l(mu_);
  uint64_t key = next_key_++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, dup.get(), &ev) != 0)
    return Status::FromErrno("epoll_ctl add pidfd");
  entries_[key] = Entry{std::move(dup), std::move(on_exit)};
  return key;
}

void ProcessWatcher::Unwatch(uint64_t key) {
  std::unique_lock l(mu_);
  cv_.wait(l, [&] { return running_key_ != key; });
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.pidfd.get(), nullptr);
  entries_.erase(it);
}

size_t ProcessWatcher::size() const {
  std::lock_guard l(mu_);
  return entries_.size();
}

void ProcessWatcher::Run() {
  epoll_event events[32];
  for (;;) {
    int n = ::epoll_wait(epoll_.get(), events, 32, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    for (int i = 0; i < n; ++i) {
      uint64_t key = events[i].data.u64;
      if (key == 0) return;
      OnExit cb;
      std::optional<int> code;
      {
        std::lock_guard l(mu_);
        auto it = entries_.find(key);
        if (it == entries_.end()) continue;
        code = ReapIfChild(it->second.pidfd.get());
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.pidfd.get(), nullptr);
        cb = std::move(it->second.on_exit);
        entries_.erase(it);
        running_key_ = key;
      }
      if (cb) cb(code);
      {
        std::lock_guard l(mu_);
        running_key_ = 0;
      }
      cv_.notify_all();
    }
  }
}

}  // namespace kubicle::noderuntime
