// A watchdog for the linux tier's test binaries. Inside the nested test host
// a hang (a guest that never answers, a process stuck in the kernel) would
// otherwise only end at the harness's hard timeout, with no hint where it
// was. The watchdog bounds each test: past the limit it prints the test's
// last progress step, the VM directories' serial and VMM log tails, and
// every kubicle process's state, kernel wait channel and stack, then exits
// the binary with status 1. Phases timed: each suite set-up, each test, and
// each gap after a test (tear-downs). Call StartWatchdog before
// RUN_ALL_TESTS (a static initializer does).
#pragma once

#include <chrono>
#include <string>

namespace kubicle::e2e::nested {

// Prints "[progress +12.3s] what" to stderr (unbuffered) and records it as the
// current step for the watchdog report.
void Progress(const std::string& what);

// Registers a kubicle-vmm scratch directory whose serial.log and vmm.log the
// report includes (a directory removed since shows empty logs).
void WatchVmDir(const std::string& dir);

// Starts the watchdog (idempotent): each test may run at most `limit`.
void StartWatchdog(std::chrono::seconds limit);

}  // namespace kubicle::e2e::nested
