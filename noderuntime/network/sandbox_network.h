// SandboxNetwork: the node's per-sandbox network namespaces (docs/network.md).
// A slot is one namespace, bind-mounted at <netns_dir>/slot-<N>, holding
//  - veth0, the namespace end of a veth pair whose host end is
//    kh<tag>-<N>, with slot N's /30 of the node's sandbox CIDR
//    (AddressPlan) and a default route to the host end;
//  - tap0 at guest_network.h's gateway address and MAC, which the VMM opens;
//  - table `ip kubicle`: the sandbox's egress policy and the masquerade of
//    the guest's address out of veth0 (ruleset.h).
// On the host it keeps table `ip kubicle_<tag>` and IPv4 forwarding on.
//
// Creates must not wait for `ip`: a worker thread keeps `pool_size` slots
// built with the default policy, and tears released slots down, so Acquire
// of the default policy is a list pop and Release is a queue push. With the
// pool empty Acquire builds the slot itself.
//
// Contracts:
//  - Open refuses a CIDR that overlaps a route the host already has (other
//    than this node's own veths: a restarted node finds its slots there).
//  - Slots a running sandbox holds survive the node daemon: Adopt (before
//    Start) takes them back; Start then sweeps every namespace file and host
//    veth of this node's tag that no slot holds. SweepOrphans does the same
//    later (the node's periodic orphan sweep). What it sweeps is this
//    node's only: files under its own netns_dir and veths of its own tag,
//    so nodes sharing a host (distinct state directories) never sweep each
//    other's.
//  - Start builds one slot before it returns: a host that cannot build
//    one (no CAP_NET_ADMIN or CAP_SYS_ADMIN, no /dev/net/tun, a netns_dir
//    that cannot take bind mounts) fails the start rather than every create.
//  - Every method is thread-safe. Stop() finishes queued releases, tears
//    down idle pool slots and leaves slots in use alone.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "noderuntime/network/address_plan.h"
#include "noderuntime/network/egress_policy.h"
#include "noderuntime/network/net_system.h"
#include "noderuntime/network/ruleset.h"

namespace kubicle::noderuntime::network {

struct NetworkSlot {
  uint32_t index = 0;
  std::string netns;      // the namespace's file: what the VMM's --net netns= takes
  std::string host_veth;  // kh<tag>-<index>
  SlotAddresses addresses;
};

class SandboxNetwork {
 public:
  struct Options {
    NetSystem* system = nullptr;  // not owned; outlives this
    Cidr cidr;                    // --sandbox-network-cidr
    std::string netns_dir;        // absolute; created if missing
    std::string tag;              // 1..4 of [a-z0-9]: this node's names on the host
    size_t pool_size = 4;         // slots kept built (0: build at Acquire)
    // Told of each slot built (its build time) and each build that failed,
    // on the thread that built it; may be empty. For the node's metrics.
    std::function<void(double seconds)> on_built;
    std::function<void()> on_build_failed;
    std::function<void(size_t count)> on_orphans_swept;  // after a sweep that found some
  };
  struct Census {
    size_t pooled = 0;     // built, idle
    size_t in_use = 0;     // held by sandboxes (or a bake)
    size_t building = 0;   // being built (for the pool or an Acquire)
    size_t releasing = 0;  // queued or being torn down
    uint64_t built = 0;    // since Open
    uint64_t released = 0;
    uint64_t build_failures = 0;  // builds that failed (their halves released)
    uint64_t orphans_swept = 0;   // namespaces and veths no slot held, torn down
    size_t capacity = 0;          // slots the CIDR holds
    size_t free = 0;              // of those, in no state above
  };

  // Checks the CIDR against the host's routes, reads the node's addresses,
  // installs the host table and turns forwarding on.
  static Result<std::unique_ptr<SandboxNetwork>> Open(Options options);
  ~SandboxNetwork();
  SandboxNetwork(const SandboxNetwork&) = delete;
  SandboxNetwork& operator=(const SandboxNetwork&) = delete;

  // Before Start: slot `index` is a running sandbox's. NotFound if its
  // namespace is gone, InvalidArgument if the plan has no such slot.
  Result<NetworkSlot> Adopt(uint32_t index);
  // Sweeps orphans, builds the first slot (into the pool, or torn down
  // again with a pool of 0) and starts the worker. The build's error is
  // returned: the host cannot give sandboxes a network.
  Status Start();
  // A slot with `policy` in force.
  Result<NetworkSlot> Acquire(const EgressPolicy& policy);
  // Replaces a held slot's policy.
  Status ApplyPolicy(uint32_t index, const EgressPolicy& policy);
  // Gives a held slot back; it is torn down off the caller's path.
  void Release(uint32_t index);
  // Tears down this node's namespaces and veths that no slot holds.
  size_t SweepOrphans();
  // `remove_host_table`: also the host's table (nothing of ours runs on).
  void Stop(bool remove_host_table);

  Census census() const;
  std::string NetnsPath(uint32_t index) const;
  std::string HostVeth(uint32_t index) const;
  const AddressPlan& plan() const { return plan_; }
  const SandboxRulesetInputs& ruleset_inputs() const { return inputs_; }
  std::string host_table() const { return "kubicle_" + options_.tag; }

 private:
  SandboxNetwork(Options options, AddressPlan plan);
  Status CheckNoOverlap();
  Status ReadNodeAddresses();
  NetworkSlot SlotOf(uint32_t index) const;
  Status Build(const NetworkSlot& slot, const EgressPolicy& policy);
  // Build, timed and counted (on_built / on_build_failed, the census).
  Status BuildCounted(const NetworkSlot& slot, const EgressPolicy& policy);
  void TearDown(uint32_t index);
  // The lowest index nothing holds; requires mu_. ResourceExhausted if none.
  Result<uint32_t> TakeFreeIndexLocked();
  void Work();
  bool WorkToDoLocked() const;

  Options options_;
  AddressPlan plan_;
  SandboxRulesetInputs inputs_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<uint32_t> taken_;  // every index in any state below, or being swept
  std::deque<NetworkSlot> pool_;
  std::set<uint32_t> in_use_;
  std::deque<uint32_t> releasing_;
  size_t building_ = 0, pool_building_ = 0, tearing_down_ = 0;
  uint64_t built_ = 0, released_ = 0, build_failures_ = 0, orphans_swept_ = 0;
  bool started_ = false, stopping_ = false;
  std::thread worker_;
};

}  // namespace kubicle::noderuntime::network
