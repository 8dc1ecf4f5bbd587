// SIGINT and SIGTERM taken synchronously, the way every long-running binary
// here stops: block them before the first thread starts (threads inherit the
// mask, so none is interrupted), then wait for one on the main thread or on
// one watcher thread.
#pragma once

#include <signal.h>

#include <chrono>
#include <initializer_list>

namespace kubicle {

class StopSignals {
 public:
  // Blocks `signals` in the calling thread. Construct before any thread
  // starts (or before any thread that must not take them).
  explicit StopSignals(std::initializer_list<int> signals = {SIGINT, SIGTERM});
  // The signal that arrived: 0 when `timeout` passed first.
  int WaitFor(std::chrono::milliseconds timeout) const;
  // Waits for one, however long it takes.
  int Wait() const;

 private:
  sigset_t set_;
};

}  // namespace kubicle
