// TeardownQueue: work that must happen but not on a caller's path — a
// per-call run's VM is torn down here after its answer has gone out
// (closing a KVM VM alone costs ~15 ms on these hosts).
//
// Contracts:
//  - Tasks run in order on one thread of the queue's own.
//  - Stop() runs every task still queued before it returns, so nothing
//    handed over is dropped; Post after Stop runs the task at once on the
//    caller's thread. Thread-safe; the destructor stops.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace kubicle::noderuntime {

class TeardownQueue {
 public:
  TeardownQueue() = default;
  ~TeardownQueue() { Stop(); }
  TeardownQueue(const TeardownQueue&) = delete;
  TeardownQueue& operator=(const TeardownQueue&) = delete;

  void Start();
  void Post(std::function<void()> task);
  void Stop();
  // Tasks queued or running.
  size_t pending() const;
  // Waits until nothing is queued or running (tests, shutdown paths).
  void Drain();
  // Waits until a task finishes or the deadline passes; false at once when
  // nothing is queued or running (no task will finish), false at the deadline.
  bool WaitForProgress(std::chrono::steady_clock::time_point deadline);

 private:
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  size_t running_ = 0;
  uint64_t finished_ = 0;
  bool started_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace kubicle::noderuntime
