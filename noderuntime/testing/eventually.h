// Eventually: polls a condition (every millisecond) until it holds or the
// timeout passes, for the node runtime's unit tests, whose background
// threads (watcher, pool, sweeper) act a little after the call that asked.
#pragma once

#include <chrono>
#include <cstdint>
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

// True once a SandboxManager's reserved guest RAM is `sandbox_mib` beyond
// what its idle pool VMs (`pool_vm_mib` each) hold. Polled: a pool VM that
// is starting holds its capacity before it counts as idle.
template <typename Manager>
bool SandboxesHoldMib(const Manager& m, uint64_t sandbox_mib, uint64_t pool_vm_mib = 64) {
  return Eventually([&] {
    const auto u = m.usage();
    return u.mem_mib == sandbox_mib + pool_vm_mib * u.pool_vms;
  });
}

}  // namespace kubicle::noderuntime::testing
