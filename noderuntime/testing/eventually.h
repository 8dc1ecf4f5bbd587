// Eventually: polls a condition (every millisecond) until it holds or the
// timeout passes, for the node runtime's unit tests, whose background
// threads (watcher, pool, sweeper) act a little after the call that asked.
#pragma once

#include <chrono>
#include <thread>

namespace kubicle::noderuntime::testing {

// True as soon as done() is; false if it still is not after `timeout`.
template <typename F>
bool Eventually(F done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace kubicle::noderuntime::testing
