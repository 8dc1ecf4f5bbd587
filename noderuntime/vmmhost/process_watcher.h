// ProcessWatcher: one thread that waits on the pidfds of every VMM process
// the node supervises (its own children and re-adopted strangers alike: a
// pidfd works for both) and reports each exit once.
//
// Contracts: Watch takes a duplicate of the pidfd, so the caller keeps its
// own. The callback runs on the watcher thread, once, with the exit code
// (0-255, or 128 + signal) when the process was our child and the watcher
// reaped it, nullopt otherwise (someone else reaped it). Unwatch guarantees
// the callback is not running and will not run afterwards. Callbacks must
// not call Watch/Unwatch on the same watcher for the same key.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime {

class ProcessWatcher {
 public:
  using OnExit = std::function<void(std::optional<int> exit_code)>;

  ProcessWatcher();
  ~ProcessWatcher();  // stops the thread; pending callbacks never run
  ProcessWatcher(const ProcessWatcher&) = delete;
  ProcessWatcher& operator=(const ProcessWatcher&) = delete;

  Status Start();
  // Returns a key for Unwatch.
  Result<uint64_t> Watch(int pidfd, OnExit on_exit);
  void Unwatch(uint64_t key);
  size_t size() const;

 private:
  void Run();

  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd that stops the loop
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_key_ = 1;
  uint64_t running_key_ = 0;  // the key whose callback runs now
  struct Entry {
    UniqueFd pidfd;
    OnExit on_exit;
  };
  std::map<uint64_t, Entry> entries_;
};

}  // namespace kubicle::noderuntime
