// Per-VM cgroups: a CPU quota of `vcpus` whole CPUs, a memory limit of the
// guest's RAM plus the VMM's own overhead, and a pids limit, one group per
// sandbox under a "kubicle" parent. Works on cgroup v1 (separate cpu, memory
// and pids hierarchies, as on this machine) and v2 (unified; chosen when
// <root>/cgroup.controllers exists).
//
// On v1 a VMM also joins one group per node (named like the parent) in
// every other hierarchy mounted under the root (cpuset, devices, freezer,
// blkio, name=systemd, the hybrid "unified" one...), with no limits there:
// a container runtime stops a container by killing every process of the
// container's group in one hierarchy (runc: devices; the kubelet: all of
// them), so a VMM left in the node's own group of any hierarchy would die
// with the node's container (docs/node.md, "VMMs across node restarts and
// rollouts"). Shared, not per VM: nothing is limited there, and a cgroup2
// group (the hybrid "unified") cannot be renamed, which a pool VM's
// groups are when it is taken.
//
// Contracts: the root is injected so tests use a plain directory that looks
// like a cgroup mount. Create is idempotent; Remove deletes the groups and
// must be called after the processes in them are gone (the kernel refuses
// rmdir of a populated group: Remove then answers FailedPrecondition).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime {

struct CgroupLimits {
  uint64_t mem_mib = 0;       // guest RAM
  uint64_t overhead_mib = 64; // VMM heap, page tables, device buffers
  uint32_t vcpus = 1;
  uint64_t pids_max = 256;    // the VMM's threads (vCPUs, event loop)
};

class Cgroups {
 public:
  // enabled=false makes every call a no-op (hosts where we may not write).
  // `parent` is the group under which each VM's group is made ("kubicle").
  Cgroups(std::string root, bool enabled, std::string parent = "kubicle");

  bool enabled() const { return enabled_; }
  bool v2() const { return v2_; }
  Status Create(const std::string& name, const CgroupLimits& limits);
  Status AddProcess(const std::string& name, pid_t pid);
  // Renames a group (with its processes and limits) in every hierarchy.
  Status Rename(const std::string& from, const std::string& to);
  // Tries `attempts` times (1 ms, later 10 ms apart) while the group is busy:
  // kubicle-vmm's teardown helper stays in it for a moment after the VMM exits.
  Status Remove(const std::string& name, int attempts = 100);
  // Names of the groups that exist under the parent.
  // Removes the (empty) parent groups themselves, trying each `attempts`
  // times while busy.
  Status RemoveParent(int attempts = 100);
  std::vector<std::string> List() const;
  // The directories of a group (one per v1 controller, or the v2 one).
  std::vector<std::string> Dirs(const std::string& name) const;
  // The node's one group in each other v1 hierarchy, which every VMM joins
  // in AddProcess; removed by RemoveParent.
  std::vector<std::string> SharedGroups() const;
  // The v1 hierarchies besides cpu, memory and pids found under the root
  // (directory names, sorted); empty on v2 and on roots without them.
  const std::vector<std::string>& other_hierarchies() const { return others_; }
  // OK when groups made under the root lie outside the own group of the
  // process `pid`, whose /proc/<pid>/cgroup reads `proc_cgroup`; else
  // FailedPrecondition saying why. On v1 a container's /sys/fs/cgroup is a
  // view of the container's own group: groups made there are inside it and
  // die with the container. The root is the host's when the process's
  // group, as /proc names it, lists the process under the root. v2 with a
  // cgroup namespace cannot be told apart this way: OK (unchecked).
  Status CheckOutsideOwnGroup(const std::string& proc_cgroup, pid_t pid) const;

 private:
  std::vector<std::string> Parents() const;
  Status EnableV2Controllers();

  std::string root_;
  std::string parent_;
  bool enabled_;
  bool v2_ = false;
  std::vector<std::string> others_;
};

}  // namespace kubicle::noderuntime
