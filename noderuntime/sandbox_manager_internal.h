// Internal state of SandboxManager shared by its .cc files (not part of the
// library's interface).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "common/unique_fd.h"
#include "guest/client/agent_client.h"
#include "noderuntime/sandbox_manager.h"
#include "noderuntime/vmm_process.h"

namespace kubicle::noderuntime {

struct SandboxManager::Sandbox {
  // Held for a whole create or delete: one lifecycle operation at a time.
  std::mutex op_mu;
  // Guards everything below; never held while waiting for a VM or agent.
  std::mutex mu;
  std::condition_variable cv;  // signalled when `exited` becomes true
  SandboxRecord rec;           // rec.info.token is always empty
  VmShape shape;
  std::string dir;
  std::string log_path;
  std::unique_ptr<VmmProcess> vmm;  // null once the VMM is gone or let go
  uint64_t watch_key = 0;
  bool exited = false;
  bool delete_requested = false;
  bool removed = false;        // gone from the manager's map
  bool holds_capacity = false;
  bool holds_cid = false;
  bool holds_cgroup = false;
  std::shared_ptr<guest::client::AgentClient> agent;
};

struct SandboxManager::Template {
  std::mutex mu;
  TemplateInfo info;
  bool in_pool = false;  // its shape is registered with the warm pool
};

// Memory and vCPUs handed out to sandboxes and pool VMs.
class SandboxManager::Capacity {
 public:
  Capacity(uint64_t mem_mib, uint32_t vcpus) : mem_total_(mem_mib), vcpus_total_(vcpus) {}
  bool TryReserve(const VmShape& s) {
    std::lock_guard l(mu_);
    if (mem_used_ + s.mem_mib > mem_total_ || vcpus_used_ + s.vcpus > vcpus_total_) return false;
    mem_used_ += s.mem_mib;
    vcpus_used_ += s.vcpus;
    return true;
  }
  // Re-adopted VMs count even when a smaller capacity is configured now.
  void ForceReserve(const VmShape& s) {
    std::lock_guard l(mu_);
    mem_used_ += s.mem_mib;
    vcpus_used_ += s.vcpus;
  }
  void Release(const VmShape& s) {
    std::lock_guard l(mu_);
    mem_used_ -= std::min(mem_used_, s.mem_mib);
    vcpus_used_ -= std::min(vcpus_used_, s.vcpus);
  }
  std::pair<uint64_t, uint32_t> used() const {
    std::lock_guard l(mu_);
    return {mem_used_, vcpus_used_};
  }

 private:
  mutable std::mutex mu_;
  uint64_t mem_total_, mem_used_ = 0;
  uint32_t vcpus_total_, vcpus_used_ = 0;
};

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace kubicle::noderuntime
