// WarmPool: pre-started `kubicle-vmm pool` processes, a few per VM shape
// (memory, vCPUs), so a sandbox create only pays the restore itself. A
// background thread keeps each wanted shape topped up and drops pool VMs
// that died; a miss starts one on the spot.
//
// Contracts: each pool VM holds a capacity reservation taken through
// Options::reserve before it starts; Take hands that reservation to the
// caller with the VM (the caller releases it when the sandbox goes); Evict
// and Stop release it. A pool VM's files are <dir>/<name>.log and its
// control socket <sock_dir>/<name>.ctl; the taker renames them. VMMs are
// started through Options::launcher (vmm_launcher.h), which outlives the pool.
#pragma once

#include <atomic>
#include <chrono>
#include <compare>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "noderuntime/vmmhost/vmm_launcher.h"
#include "vmm/launch_spec.h"

namespace kubicle::noderuntime {

struct VmShape {
  uint64_t mem_mib = 0;
  uint32_t vcpus = 0;
  auto operator<=>(const VmShape&) const = default;
};

struct PoolVm {
  std::string name;
  VmShape shape;
  std::unique_ptr<VmmProcess> vmm;
  std::string control_path;
  std::string log_path;
  std::chrono::steady_clock::time_point started;
};

class WarmPool {
 public:
  struct Options {
    VmmLauncher* launcher = nullptr;  // not owned
    std::string dir;       // logs
    std::string sock_dir;  // control sockets
    uint32_t per_shape = 2;
    // What every VMM of the node gets (console limits, seccomp); the pool
    // makes it a `pool` spec of the shape, with its control socket and id.
    vmm::LaunchSpec vmm_base;
    std::function<bool(const VmShape&)> reserve;  // false: no capacity now
    std::function<void(const VmShape&)> release;
    std::function<void()> on_change;  // pool size changed (metrics)
    // Off the create path: called once a pool VM answers (e.g. its cgroup);
    // `discard` undoes it when the pool kills the VM.
    std::function<void(const PoolVm&)> prepare;
    std::function<void(const PoolVm&)> discard;
  };

  explicit WarmPool(Options options);
  ~WarmPool();  // Stop()
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  void Start();
  // Kills every idle pool VM and joins the refill thread.
  void Stop();
  // Reference-counted: the shape is kept warm while any holder wants it.
  void Want(const VmShape& shape);
  void Unwant(const VmShape& shape);
  // A live pool VM of this shape with its reservation, if one is ready. With
  // a wait, and none ready but one of this shape starting, waits for it.
  std::optional<PoolVm> Take(const VmShape& shape,
                             std::chrono::milliseconds wait_for_starting = std::chrono::milliseconds(0));
  // Starts one now, for a miss; the caller has reserved its capacity.
  Result<PoolVm> StartNow(const VmShape& shape);
  // Kills one idle VM of another shape than `keep` (its capacity is released).
  bool EvictOne(const VmShape& keep);
  size_t idle() const;
  std::vector<pid_t> idle_pids() const;
  // Kills a VM (taken or not) and removes its files and what `prepare` made;
  // does not touch capacity.
  void Destroy(PoolVm& vm);

 private:
  void Run();
  void DropDead();  // requires mu_
  Result<PoolVm> Launch(const VmShape& shape);  // spawns, does not wait
  Status Failed(PoolVm& vm, Status why);         // destroys it, says why
  void LaunchWanted();   // requires mu_: starts what the wanted shapes lack
  bool PollLaunching();  // requires mu_: moves answering VMs to idle_

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  std::map<VmShape, int> wanted_;
  std::map<VmShape, std::vector<PoolVm>> idle_;
  std::map<VmShape, int> starting_;
  std::vector<PoolVm> launching_;  // spawned by the refill thread, not answering yet
  std::chrono::steady_clock::time_point backoff_until_{};
  std::atomic<uint64_t> next_{0};
};

}  // namespace kubicle::noderuntime
