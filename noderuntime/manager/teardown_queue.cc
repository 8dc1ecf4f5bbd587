#include "noderuntime/manager/teardown_queue.h"

namespace kubicle::noderuntime {

void TeardownQueue::Start() {
  std::lock_guard l(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void TeardownQueue::Post(std::function<void()> task) {
  {
    std::lock_guard l(mu_);
    if (started_ && !stopping_) {
      tasks_.push_back(std::move(task));
      cv_.notify_all();
      return;
    }
  }
  task();  // not running (yet, or any more): nothing may be dropped
}

void TeardownQueue::Loop() {
  std::unique_lock l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and everything ran
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    ++running_;
    l.unlock();
    task();
    l.lock();
    --running_;
    ++finished_;
    cv_.notify_all();
  }
}

void TeardownQueue::Stop() {
  {
    std::lock_guard l(mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

size_t TeardownQueue::pending() const {
  std::lock_guard l(mu_);
  return tasks_.size() + running_;
}

bool TeardownQueue::WaitForProgress(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock l(mu_);
  if (tasks_.empty() && running_ == 0) return false;
  const uint64_t seen = finished_;
  return cv_.wait_until(l, deadline, [&] { return finished_ != seen; });
}

void TeardownQueue::Drain() {
  std::unique_lock l(mu_);
  cv_.wait(l, [&] { return tasks_.empty() && running_ == 0; });
}

}  // namespace kubicle::noderuntime
