// NodeSlot: the host-wide resources of one real kubelet node of the e2e
// harness (kubelet_node.h), so several nodes (tests of different engineers,
// CTest runs) share a host without meeting: slot <i> (0..31) owns, while
// its holder lives, the Service range 10.96.<i>.0/24 (the `kubernetes`
// Service at 10.96.<i>.1), the pod range 10.97.<i>.0/24 on bridge
// kbe2e<i>, the nftables table kubicle_e2e_<i>, the v1 cgroups under
// /kubicle-e2e-<i> and the scratch directory /tmp/kubicle-e2e-node/<i>.
// It is held by an flock on /tmp/kubicle-e2e-node/<i>.lock (released when
// the holder dies, however it dies).
//
// CleanUp() removes everything a node of this slot can leave on the host --
// processes (kubelet, containerd, shims, containers), mounts under the
// scratch directory, the pods' network namespaces, cgroups, the bridge and
// the nftables table -- and is idempotent: Take() runs it first, so a node
// whose test was SIGKILLed is swept by the next holder of its slot.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::e2e {

class NodeSlot {
 public:
  // The lowest free slot, cleaned; fails when all are held.
  static Result<NodeSlot> Take();

  int index() const { return index_; }
  std::string service_cidr() const { return Net(96) + ".0/24"; }
  std::string service_ip() const { return Net(96) + ".1"; }
  std::string pod_cidr() const { return Net(97) + ".0/24"; }
  std::string pod_prefix() const { return Net(97) + "."; }
  std::string bridge() const { return "kbe2e" + std::to_string(index_); }
  std::string nft_table() const { return "kubicle_e2e_" + std::to_string(index_); }
  // Relative to each v1 hierarchy's root, e.g. /kubicle-e2e-0.
  std::string cgroup_root() const { return "/kubicle-e2e-" + std::to_string(index_); }
  std::string dir() const { return "/tmp/kubicle-e2e-node/" + std::to_string(index_); }

  // Kills, unmounts and removes everything of this slot; `keep_logs` leaves
  // the scratch directory and its own *.log files, nothing else
  // (KUBICLE_E2E_KEEP).
  Status CleanUp(bool keep_logs = false) const;
  // What CleanUp would still find (empty when the host is clean): one line
  // per process, mount, netns, cgroup, link or table.
  std::vector<std::string> Leftovers() const;

 private:
  NodeSlot(int index, UniqueFd lock) : index_(index), lock_(std::move(lock)) {}
  std::string Net(int second) const {
    return "10." + std::to_string(second) + "." + std::to_string(index_);
  }

  int index_ = -1;
  UniqueFd lock_;
};

// The v1 hierarchies mounted under /sys/fs/cgroup (cpu, memory, ...,
// name=systemd as "systemd"), for a cgroup root of one's own.
std::vector<std::string> CgroupV1Hierarchies();

}  // namespace kubicle::e2e
