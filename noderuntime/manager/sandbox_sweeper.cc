#include "noderuntime/manager/sandbox_sweeper.h"

#include <signal.h>

#include <algorithm>

#include "common/log.h"

namespace kubicle::noderuntime {

namespace {
using Clock = std::chrono::steady_clock;
// A busy group is free a few ms after its VMM exits: retry that often.
constexpr std::chrono::milliseconds kCgroupRetry{20};
}  // namespace

Sweeper::Sweeper(Options options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = [] { return std::chrono::system_clock::now(); };
}

Sweeper::~Sweeper() { Stop(); }

void Sweeper::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void Sweeper::Stop() {
  {
    std::lock_guard l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Sweeper::Loop() {
  const bool orphans = options_.orphan_interval.count() > 0;
  auto next_ttl = Clock::now() + options_.ttl_interval;
  auto next_orphans = Clock::now() + options_.orphan_interval;
  std::unique_lock l(mu_);
  while (!stopping_) {
    auto until = pending_cgroups_.empty() ? next_ttl : std::min(next_ttl, Clock::now() + kCgroupRetry);
    if (orphans) until = std::min(until, next_orphans);
    cv_.wait_until(l, until);
    if (stopping_) break;
    l.unlock();
    RetryCgroupRemovals(1);
    if (Clock::now() >= next_ttl) {
      SweepExpired();
      next_ttl = Clock::now() + options_.ttl_interval;
    }
    if (orphans && Clock::now() >= next_orphans) {
      SweepOrphans(options_.orphan_min_age);
      next_orphans = Clock::now() + options_.orphan_interval;
    }
    l.lock();
  }
}

std::vector<std::string> Sweeper::SweepExpired() {
  std::vector<std::string> done;
  for (const std::string& id : options_.target->ExpiredSandboxes(options_.clock())) {
    if (!options_.target->DeleteExpired(id).ok()) continue;
    done.push_back(id);
    log::Info("sandbox ttl expired", {{"sandbox", id}});
  }
  return done;
}

size_t Sweeper::SweepOrphans(std::chrono::seconds min_age) {
  const std::set<pid_t> owned = options_.target->OwnedVmms();
  VmmLauncher& launcher = *options_.launcher;
  size_t killed = 0;
  for (pid_t pid : launcher.FindVmms(options_.state_dir)) {
    // Young ones may be a pool VM starting or a fork child being adopted.
    if (owned.count(pid) || launcher.AgeSeconds(pid) < static_cast<double>(min_age.count()))
      continue;
    auto h = launcher.Attach(pid, std::nullopt);
    if (!h.ok()) continue;
    (void)(*h)->Signal(SIGKILL);
    ++killed;
    log::Warn("killed orphan kubicle-vmm", {{"pid", pid}});
  }
  options_.target->SweepNetworkOrphans();
  return killed;
}

void Sweeper::RemoveCgroupSoon(const std::string& name) {
  // kubicle-vmm exits before the kernel has torn its VM down: a helper that
  // holds the VM stays in the group for a few ms more. Rather than block the
  // delete, the thread retries busy groups.
  if (options_.cgroups->Remove(name, 3).ok()) return;
  {
    std::lock_guard l(mu_);
    pending_cgroups_.insert(name);
  }
  cv_.notify_all();
}

void Sweeper::ForgetCgroup(const std::string& name) {
  std::lock_guard l(mu_);
  pending_cgroups_.erase(name);
}

void Sweeper::RetryCgroupRemovals(int attempts) {
  std::set<std::string> pending;
  {
    std::lock_guard l(mu_);
    pending.swap(pending_cgroups_);
  }
  for (const std::string& name : pending) {
    Status s = options_.cgroups->Remove(name, attempts);
    if (s.ok()) continue;
    // The thread retries every 20 ms while a killed VM's threads exit: only
    // a removal that still fails after a patient try is worth a warning.
    if (attempts > 1) {
      log::Warn("cgroup removal failed", {{"sandbox", name}, {"error", s.ToString()}});
    } else {
      log::Debug("cgroup still busy; retrying", {{"sandbox", name}, {"error", s.ToString()}});
    }
    std::lock_guard l(mu_);
    pending_cgroups_.insert(name);
  }
}

size_t Sweeper::pending_cgroups() const {
  std::lock_guard l(mu_);
  return pending_cgroups_.size();
}

}  // namespace kubicle::noderuntime
