// Injected wall clock for everything in the operator and the node agent that
// depends on time (expiry, backoff, leases, delayed requeues), so tests can
// drive time.
// Contract: Now() is thread-safe. FakeClock only moves when Advance()/Set()
// is called.
#pragma once

#include <chrono>
#include <mutex>

namespace kubicle::kube {

using TimePoint = std::chrono::system_clock::time_point;
using Duration = std::chrono::system_clock::duration;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::system_clock::now(); }
  static RealClock& Instance() {
    static RealClock clock;
    return clock;
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint(std::chrono::seconds(1767225600)))
      : now_(start) {}
  TimePoint Now() const override {
    std::lock_guard lock(mu_);
    return now_;
  }
  void Advance(Duration d) {
    std::lock_guard lock(mu_);
    now_ += d;
  }
  void Set(TimePoint t) {
    std::lock_guard lock(mu_);
    now_ = t;
  }

 private:
  mutable std::mutex mu_;
  TimePoint now_;
};

}  // namespace kubicle::kube
