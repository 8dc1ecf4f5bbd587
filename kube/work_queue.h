// A rate-limited work queue with client-go's semantics, for reconcilers:
// - a key queued several times is processed once (dedup of queued keys);
// - a key is never handed to two workers at once: re-adding a key that is
//   being processed parks it until Done(), then it is queued again;
// - AddRateLimited delays by max(per-item exponential backoff 5 ms..1000 s,
//   a 10 qps / burst 100 token bucket); Forget resets the item's backoff;
// - AddAfter queues a key once its time comes (expiry requeues).
// Time comes from the injected Clock. Delayed keys become ready when Get()
// notices their time has passed; with a FakeClock call Poke() after
// advancing it. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "kube/clock.h"

namespace kubicle::kube {

// Per-item exponential backoff: base * 2^failures, capped.
class ItemExponentialLimiter {
 public:
  ItemExponentialLimiter(Duration base, Duration max) : base_(base), max_(max) {}
  Duration When(const std::string& key);
  void Forget(const std::string& key) { failures_.erase(key); }
  int Failures(const std::string& key) const;

 private:
  Duration base_, max_;
  std::map<std::string, int> failures_;
};

// Token bucket: `qps` tokens per second, at most `burst` saved up. When()
// reserves a token and returns how long until it is available.
class BucketLimiter {
 public:
  BucketLimiter(double qps, int burst, const Clock* clock);
  Duration When();

 private:
  double qps_;
  double burst_;
  double tokens_;
  TimePoint last_;
  const Clock* clock_;
};

class WorkQueue {
 public:
  explicit WorkQueue(const Clock* clock = &RealClock::Instance());

  void Add(const std::string& key);
  void AddAfter(const std::string& key, Duration delay);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  // Blocks until a key is ready (returns it, marked processing) or the queue
  // is shut down and drained of ready keys (returns nullopt).
  std::optional<std::string> Get();
  // Like Get but gives up after `timeout` of real time.
  std::optional<std::string> TryGet(std::chrono::milliseconds timeout);
  void Done(const std::string& key);
  void ShutDown();
  void Poke() { cv_.notify_all(); }

  size_t Len() const;          // ready keys (the "depth" metric)
  size_t DelayedLen() const;   // keys waiting for their time
  int Failures(const std::string& key) const;

 private:
  void AddLocked(const std::string& key);
  void PromoteDueLocked();
  std::optional<std::string> PopLocked();

  const Clock* clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;       // queued or waiting to be re-queued
  std::set<std::string> processing_;
  std::multimap<TimePoint, std::string> delayed_;
  std::map<std::string, TimePoint> delayed_at_;  // earliest time per key
  ItemExponentialLimiter item_limiter_;
  BucketLimiter bucket_;
  bool shutting_down_ = false;
};

}  // namespace kubicle::kube
