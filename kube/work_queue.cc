#include "kube/work_queue.h"

#include <algorithm>
#include <cmath>

namespace kubicle::kube {

using std::chrono::duration_cast;

Duration ItemExponentialLimiter::When(const std::string& key) {
  int n = failures_[key]++;
  double factor = std::pow(2.0, std::min(n, 62));
  double d = static_cast<double>(base_.count()) * factor;
  if (d > static_cast<double>(max_.count())) return max_;
  return Duration(static_cast<Duration::rep>(d));
}

int ItemExponentialLimiter::Failures(const std::string& key) const {
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

BucketLimiter::BucketLimiter(double qps, int burst, const Clock* clock)
    : qps_(qps), burst_(burst), tokens_(burst), last_(clock->Now()), clock_(clock) {}

Duration BucketLimiter::When() {
  TimePoint now = clock_->Now();
  double elapsed = std::chrono::duration<double>(now - last_).count();
  if (elapsed > 0) {
    tokens_ = std::min(burst_, tokens_ + elapsed * qps_);
    last_ = now;
  }
  tokens_ -= 1.0;
  if (tokens_ >= 0) return Duration::zero();
  return duration_cast<Duration>(std::chrono::duration<double>(-tokens_ / qps_));
}

WorkQueue::WorkQueue(const Clock* clock)
    : clock_(clock),
      item_limiter_(duration_cast<Duration>(std::chrono::milliseconds(5)),
                    duration_cast<Duration>(std::chrono::seconds(1000))),
      bucket_(10.0, 100, clock) {}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_ || dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // re-queued by Done()
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& key) {
  std::lock_guard lock(mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, Duration delay) {
  std::lock_guard lock(mu_);
  if (shutting_down_) return;
  if (delay <= Duration::zero()) {
    AddLocked(key);
    return;
  }
  TimePoint at = clock_->Now() + delay;
  auto it = delayed_at_.find(key);
  if (it != delayed_at_.end()) {
    if (it->second <= at) return;  // an earlier wake-up is already pending
    for (auto d = delayed_.lower_bound(it->second); d != delayed_.end(); ++d) {
      if (d->second == key) {
        delayed_.erase(d);
        break;
      }
    }
  }
  delayed_at_[key] = at;
  delayed_.emplace(at, key);
  cv_.notify_all();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  Duration delay;
  {
    std::lock_guard lock(mu_);
    delay = std::max(item_limiter_.When(key), bucket_.When());
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard lock(mu_);
  item_limiter_.Forget(key);
}

int WorkQueue::Failures(const std::string& key) const {
  std::lock_guard lock(mu_);
  return item_limiter_.Failures(key);
}

void WorkQueue::PromoteDueLocked() {
  TimePoint now = clock_->Now();
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    delayed_at_.erase(key);
    AddLocked(key);
  }
}

std::optional<std::string> WorkQueue::PopLocked() {
  if (queue_.empty()) return std::nullopt;
  std::string key = queue_.front();
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock lock(mu_);
  while (true) {
    PromoteDueLocked();
    if (auto key = PopLocked()) return key;
    if (shutting_down_) return std::nullopt;
    // Real-time wait bounded by the next delayed key (or a short tick, so a
    // FakeClock that is advanced without Poke() is still noticed).
    auto wait = std::chrono::milliseconds(50);
    if (!delayed_.empty()) {
      auto until = duration_cast<std::chrono::milliseconds>(delayed_.begin()->first - clock_->Now());
      wait = std::clamp(until, std::chrono::milliseconds(1), wait);
    }
    cv_.wait_for(lock, wait);
  }
}

std::optional<std::string> WorkQueue::TryGet(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mu_);
  while (true) {
    PromoteDueLocked();
    if (auto key = PopLocked()) return key;
    if (shutting_down_ || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key)) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::ShutDown() {
  std::lock_guard lock(mu_);
  shutting_down_ = true;
  cv_.notify_all();
}

size_t WorkQueue::Len() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

size_t WorkQueue::DelayedLen() const {
  std::lock_guard lock(mu_);
  return delayed_.size();
}

}  // namespace kubicle::kube
