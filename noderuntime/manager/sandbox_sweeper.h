// Sweeper: the node runtime's periodic clean-up, on one thread of its own.
//  - TTL: every ttl_interval, sandboxes whose expires_at has passed (by the
//    injected clock) are deleted.
//  - Orphans: every orphan_interval, VMMs of the state directory that
//    nothing owns and that are older than orphan_min_age are SIGKILLed.
//  - Cgroups: a VM's group that is still busy when its VMM has gone (the
//    VMM's teardown helper stays in it for a few ms) is queued and retried
//    every 20 ms until it is removed.
// It owns no sandbox and no VMM: which sandboxes expired, which VMMs are
// owned and how a sandbox is deleted are its target's (SweepTarget, which
// SandboxManager implements).
//
// Contracts:
//  - Start() starts the thread once; Stop() wakes and joins it (idempotent;
//    the destructor calls it). The target, launcher and Cgroups must outlive
//    the thread. After Stop, RemoveCgroupSoon still queues and
//    RetryCgroupRemovals still retries.
//  - Every method is thread-safe: SweepExpired, SweepOrphans and
//    RetryCgroupRemovals may be called by hand (tests, Shutdown) while the
//    thread runs.
//  - Its lock guards only the cgroup queue and is a leaf: the target, the
//    launcher and Cgroups are never called while it is held, so the target
//    may call RemoveCgroupSoon under its own locks.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "noderuntime/vmmhost/cgroups.h"
#include "noderuntime/sandbox_service.h"
#include "noderuntime/vmmhost/vmm_launcher.h"

namespace kubicle::noderuntime {

// What the sweeper needs from the node runtime.
class SweepTarget {
 public:
  virtual ~SweepTarget() = default;
  // Ids of the sandboxes whose TTL has passed at `now` and that may be
  // deleted (none still being created).
  virtual std::vector<std::string> ExpiredSandboxes(WallTime now) = 0;
  // Deletes one of them (NotFound: it went meanwhile).
  virtual Status DeleteExpired(const std::string& id) = 0;
  // The pids of every VMM a sandbox, an idle pool VM or a bake owns now.
  virtual std::set<pid_t> OwnedVmms() = 0;
  // Removes network namespaces and veths no sandbox holds; returns how many.
  virtual size_t SweepNetworkOrphans() { return 0; }
};

class Sweeper {
 public:
  struct Options {
    SweepTarget* target = nullptr;    // not owned
    VmmLauncher* launcher = nullptr;  // not owned: finds, ages and kills VMMs
    Cgroups* cgroups = nullptr;       // not owned
    std::string state_dir;            // the VMMs under it are this node's
    std::function<WallTime()> clock;  // TTLs are judged by it; null: system clock
    std::chrono::milliseconds ttl_interval{1000};
    std::chrono::seconds orphan_interval{60};  // 0: only by hand
    std::chrono::seconds orphan_min_age{120};  // younger VMMs may be mid-create
  };

  explicit Sweeper(Options options);
  ~Sweeper();
  Sweeper(const Sweeper&) = delete;
  Sweeper& operator=(const Sweeper&) = delete;

  void Start();
  void Stop();

  // Deletes the sandboxes whose TTL has passed; returns those it deleted.
  std::vector<std::string> SweepExpired();
  // SIGKILLs this node's VMMs that are older than `min_age` and that no one
  // owns, then has the target sweep its network namespaces; returns how
  // many VMMs it killed.
  size_t SweepOrphans(std::chrono::seconds min_age);

  // Removes a VM's cgroup now if it is empty, else queues it for the thread.
  void RemoveCgroupSoon(const std::string& name);
  // A new VM takes the group's name over: it is no longer to be removed.
  void ForgetCgroup(const std::string& name);
  // Tries every queued group (`attempts` times each, Cgroups::Remove) and
  // queues again those still busy.
  void RetryCgroupRemovals(int attempts);
  size_t pending_cgroups() const;

 private:
  void Loop();

  Options options_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> pending_cgroups_;  // guarded by mu_
  bool stopping_ = false;                  // guarded by mu_
};

}  // namespace kubicle::noderuntime
