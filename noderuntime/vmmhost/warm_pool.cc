#include "noderuntime/vmmhost/warm_pool.h"

#include <signal.h>
#include <unistd.h>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "noderuntime/vmmhost/vmm_process.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;

WarmPool::WarmPool(Options options) : options_(std::move(options)) {
  next_ = std::chrono::steady_clock::now().time_since_epoch().count() & 0xffffff;
}

WarmPool::~WarmPool() { Stop(); }

void WarmPool::Start() {
  std::lock_guard l(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void WarmPool::Stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::map<VmShape, std::vector<PoolVm>> idle;
  {
    std::lock_guard l(mu_);
    idle.swap(idle_);
  }
  for (auto& [shape, vms] : idle) {
    for (PoolVm& vm : vms) {
      Destroy(vm);
      if (options_.release) options_.release(shape);
    }
  }
  if (options_.on_change) options_.on_change();
}

void WarmPool::Want(const VmShape& shape) {
  {
    std::lock_guard l(mu_);
    ++wanted_[shape];
  }
  cv_.notify_all();
}

void WarmPool::Unwant(const VmShape& shape) {
  std::lock_guard l(mu_);
  auto it = wanted_.find(shape);
  if (it != wanted_.end() && --it->second <= 0) wanted_.erase(it);
}

void WarmPool::Destroy(PoolVm& vm) {
  if (vm.vmm) {
    (void)vm.vmm->Signal(SIGKILL);
    WaitExited(vm.vmm->exit_fd(), 5s);
    vm.vmm->Reap();
    vm.vmm.reset();
  }
  if (!vm.control_path.empty()) ::unlink(vm.control_path.c_str());
  if (!vm.log_path.empty()) ::unlink(vm.log_path.c_str());
  if (options_.discard) options_.discard(vm);
}

void WarmPool::DropDead() {
  for (auto& [shape, vms] : idle_) {
    for (size_t i = 0; i < vms.size();) {
      if (!WaitExited(vms[i].vmm->exit_fd(), 0ms)) {
        ++i;
        continue;
      }
      std::optional<int> code = vms[i].vmm->Reap();
      log::Warn("pool vm exited", {{"vm", vms[i].name},
                                   {"status", code ? DescribeExit(*code) : "unknown"},
                                   {"log", TailOfFile(vms[i].log_path, 300)}});
      Destroy(vms[i]);
      if (options_.release) options_.release(shape);
      vms.erase(vms.begin() + static_cast<long>(i));
    }
  }
}

std::optional<PoolVm> WarmPool::Take(const VmShape& shape, std::chrono::milliseconds wait_for_starting) {
  std::optional<PoolVm> out;
  {
    std::unique_lock l(mu_);
    auto end = std::chrono::steady_clock::now() + wait_for_starting;
    for (;;) {
      DropDead();
      auto it = idle_.find(shape);
      if (it != idle_.end() && !it->second.empty()) {
        out = std::move(it->second.back());
        it->second.pop_back();
        break;
      }
      if (stop_ || starting_[shape] == 0 || cv_.wait_until(l, end) == std::cv_status::timeout) break;
    }
  }
  cv_.notify_all();
  if (out && options_.on_change) options_.on_change();
  return out;
}

bool WarmPool::EvictOne(const VmShape& keep) {
  std::optional<PoolVm> victim;
  VmShape shape;
  {
    std::lock_guard l(mu_);
    for (auto& [s, vms] : idle_) {
      if (s == keep || vms.empty()) continue;
      victim = std::move(vms.back());
      vms.pop_back();
      shape = s;
      break;
    }
  }
  if (!victim) return false;
  Destroy(*victim);
  if (options_.release) options_.release(shape);
  if (options_.on_change) options_.on_change();
  return true;
}

size_t WarmPool::idle() const {
  std::lock_guard l(mu_);
  size_t n = 0;
  for (const auto& [s, vms] : idle_) n += vms.size();
  return n;
}

std::vector<pid_t> WarmPool::idle_pids() const {
  std::lock_guard l(mu_);
  std::vector<pid_t> out;
  for (const auto& [s, vms] : idle_)
    for (const PoolVm& vm : vms) out.push_back(vm.vmm->pid());
  return out;
}

Result<PoolVm> WarmPool::Launch(const VmShape& shape) {
  PoolVm vm;
  vm.name = "pool-" + std::to_string(++next_);  // atomic: callers may hold mu_ or not
  vm.shape = shape;
  vm.control_path = options_.sock_dir + "/" + vm.name + ".ctl";
  vm.log_path = options_.dir + "/" + vm.name + ".log";
  vmm::LaunchSpec spec = options_.vmm_base;
  spec.mode = vmm::LaunchMode::kPool;
  spec.mem_bytes = shape.mem_mib << 20;
  spec.vcpus = static_cast<int>(shape.vcpus);
  spec.control_path = vm.control_path;
  spec.vm_id = vm.name;
  ASSIGN_OR_RETURN(vm.vmm, options_.launcher->Spawn(spec, vm.log_path));
  return vm;
}

Status WarmPool::Failed(PoolVm& vm, Status why) {
  std::string tail = TailOfFile(vm.log_path, 300);
  Destroy(vm);
  return why.WithContext("pool vm " + vm.name + (tail.empty() ? "" : " (" + tail + ")"));
}

Result<PoolVm> WarmPool::StartNow(const VmShape& shape) {
  ASSIGN_OR_RETURN(PoolVm vm, Launch(shape));
  Status ready = WaitForControl(vm.control_path, vm.vmm->exit_fd(), 30s);
  if (ready.ok()) ready = SetExactMode(vm.control_path, 0600);
  if (!ready.ok()) return Failed(vm, ready);
  if (options_.prepare) options_.prepare(vm);
  return vm;
}

void WarmPool::LaunchWanted() {
  for (const auto& [shape, n] : wanted_) {
    while (idle_[shape].size() + starting_[shape] < options_.per_shape) {
      if (options_.reserve && !options_.reserve(shape)) return;
      auto vm = Launch(shape);
      if (!vm.ok()) {
        if (options_.release) options_.release(shape);
        log::Error("pool vm failed to start", {{"error", vm.status().ToString()}});
        backoff_until_ = std::chrono::steady_clock::now() + 1s;  // a broken binary or host
        return;
      }
      vm->started = std::chrono::steady_clock::now();
      ++starting_[shape];
      launching_.push_back(std::move(vm).value());
    }
  }
}

bool WarmPool::PollLaunching() {
  bool changed = false;
  for (size_t i = 0; i < launching_.size();) {
    PoolVm& vm = launching_[i];
    Status failed;
    if (WaitExited(vm.vmm->exit_fd(), 0ms)) {
      vm.vmm->Reap();
      failed = Status::Unavailable("exited before its control socket answered");
    } else if (std::chrono::steady_clock::now() - vm.started > 60s) {
      failed = Status::DeadlineExceeded("control socket did not answer in 60 s");
    } else if (!vmm::control::ControlClient(vm.control_path).GetStatus(1s).ok()) {
      ++i;
      continue;
    }
    PoolVm done = std::move(vm);
    launching_.erase(launching_.begin() + static_cast<long>(i));
    --starting_[done.shape];
    changed = true;
    // The VMM bound it under its umask; it may only be the node's.
    if (failed.ok()) failed = SetExactMode(done.control_path, 0600);
    if (!failed.ok()) {
      log::Error("pool vm failed to start", {{"error", Failed(done, failed).ToString()}});
      if (options_.release) options_.release(done.shape);
      backoff_until_ = std::chrono::steady_clock::now() + 1s;
      continue;
    }
    if (options_.prepare) options_.prepare(done);
    idle_[done.shape].push_back(std::move(done));
  }
  return changed;
}

// Pool VMs start concurrently: most of a start is the kernel registering
// memory slots (an SRCU grace period), which overlaps well.
void WarmPool::Run() {
  std::unique_lock l(mu_);
  while (!stop_) {
    DropDead();
    if (std::chrono::steady_clock::now() >= backoff_until_) LaunchWanted();
    if (PollLaunching()) {
      cv_.notify_all();
      l.unlock();
      if (options_.on_change) options_.on_change();
      l.lock();
    }
    cv_.wait_for(l, launching_.empty() ? 100ms : 2ms);
  }
  for (PoolVm& vm : launching_) {
    Destroy(vm);
    if (options_.release) options_.release(vm.shape);
  }
  launching_.clear();
}

}  // namespace kubicle::noderuntime
