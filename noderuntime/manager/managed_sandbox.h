// What SandboxManager and its collaborators (the rooms of manager/) share
// about the node's sandboxes and templates: a sandbox's state and what it
// holds, a template's, the capacity and suspend-disk budgets, and the
// sandbox table. Not part of the library's interface.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "guest/client/agent_client.h"
#include "noderuntime/network/sandbox_network.h"
#include "noderuntime/sandbox_service.h"
#include "noderuntime/state/records.h"
#include "noderuntime/vmmhost/vmm_launcher.h"
#include "noderuntime/vmmhost/vmm_process.h"
#include "noderuntime/vmmhost/warm_pool.h"

namespace kubicle::noderuntime {

// One sandbox of the node (a per-call run's VM too).
struct ManagedSandbox {
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
  bool holds_slot = false;     // rec.info.network's slot is ours to release
  bool holds_suspend_disk = false;  // rec.info.suspended_bytes are counted
  bool nic = false;            // its snapshot has a network device
  bool workspace_slot = false; // its snapshot has a workspace slot
  network::EgressPolicy template_egress;  // its template's spec.network
  // The workspace it holds (rec.info.workspace names it): its image, and
  // whether releasing it is ours to do (sandbox_workspaces.h).
  std::string workspace_image;
  bool holds_workspace = false;
  // A per-call run's VM (sandbox_manager_run.cc): never persisted, listed
  // or found by id, killed rather than shut down, and torn down at any
  // Shutdown — it must not outlive its call.
  bool ephemeral = false;
  std::shared_ptr<guest::client::AgentClient> agent;
};

// One template of the node.
struct ManagedTemplate {
  std::mutex mu;
  TemplateInfo info;
  bool in_pool = false;  // its shape is registered with the warm pool
  std::string run_token_sha256;  // hex; empty: only the admin token may run
};

// Memory and vCPUs handed out to sandboxes and pool VMs.
class Capacity {
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

// Node disk held by suspended sandboxes' snapshots (bytes).
class SuspendDisk {
 public:
  explicit SuspendDisk(uint64_t total) : total_(total) {}
  bool TryReserve(uint64_t bytes) {
    std::lock_guard l(mu_);
    if (used_ + bytes > total_) return false;
    used_ += bytes;
    return true;
  }
  // Re-adopted snapshots count even when a smaller budget is configured now.
  void ForceReserve(uint64_t bytes) {
    std::lock_guard l(mu_);
    used_ += bytes;
  }
  void Release(uint64_t bytes) {
    std::lock_guard l(mu_);
    used_ -= std::min(used_, bytes);
  }
  uint64_t used() const {
    std::lock_guard l(mu_);
    return used_;
  }
  uint64_t total() const { return total_; }

 private:
  mutable std::mutex mu_;
  const uint64_t total_;
  uint64_t used_ = 0;
};

// The sandbox table: every sandbox of the node by id, and the vsock CIDs
// and restore generations handed out (sandbox_table.cc). Its lock is a leaf:
// no other lock is taken while it is held, so callers may hold a sandbox's
// mu or the manager's mu_ when they call it, and entries are handed out as
// shared_ptrs that callers lock themselves.
class SandboxTable {
 public:
  // Adds `sb` under its id with a fresh CID (rec.info.cid, holds_cid) and
  // generation (rec.generation). AlreadyExists if the id is taken.
  Status Add(const std::shared_ptr<ManagedSandbox>& sb);
  // Re-adoption: a recorded sandbox goes in as it is. Its CID and generation
  // are never handed out again; `holds_cid` also keeps its CID taken.
  void Readopt(const std::shared_ptr<ManagedSandbox>& sb, bool holds_cid);
  // Records of sandboxes that are gone still used these (their VMM may be
  // an orphan until it is killed): new ones start above.
  void SkipPast(uint32_t cid, uint64_t generation);
  std::shared_ptr<ManagedSandbox> Find(const std::string& id) const;
  std::vector<std::shared_ptr<ManagedSandbox>> All() const;
  // Removes `sb`'s id if it still names `sb` (not a newer one of the id).
  void Remove(const std::shared_ptr<ManagedSandbox>& sb);
  size_t size() const;
  // CIDs 3 .. 2^31-2, wrapping, never one in use.
  uint32_t AllocateCid();
  void ReleaseCid(uint32_t cid);

 private:
  uint32_t AllocateCidLocked();

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ManagedSandbox>> sandboxes_;
  std::set<uint32_t> cids_;
  uint32_t next_cid_ = 3;
  uint64_t next_generation_ = 1;
};

// The 6 bytes of a MAC SandboxManager formatted ("02:..:..:..:..:..").
guest::protocol::Bytes MacBytes(const std::string& mac);
// "name=ms name=ms ..." of a create's steps, for the log line.
class StepTimes {
 public:
  void Mark(const char* step) {
    auto now = std::chrono::steady_clock::now();
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%s=%.1f", text_.empty() ? "" : " ", step,
                  std::chrono::duration<double, std::milli>(now - last_).count());
    text_ += buf;
    last_ = now;
  }
  const std::string& text() const { return text_; }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::string text_;
};

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace kubicle::noderuntime
