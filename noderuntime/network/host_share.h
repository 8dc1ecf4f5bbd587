// Several kubicle-nodes with the sandbox network on one host (e2e, the
// benchmarks, the demos): each needs a sandbox CIDR of its own, since a
// node refuses a CIDR another node's veths already route, and a node that
// was killed leaves its veths, namespaces and host table behind.
//
// SandboxCidrLease hands out /20 blocks of 10.240.0.0/12 (256 of them, 1,022
// slots each) to processes on one host: block k is held while an flock on
// /tmp/kubicle-sandbox-cidr/<k>.lock is, so two test processes never pick
// the same one, and a crashed process's block is free again. The shell and
// Python harnesses use the same files (scripts/sandbox-cidr.sh,
// sdk/python/tests/e2e/stack.py). 10.240.0.0/12 is apart from the node's
// default 10.200.0.0/16, so a hand-started node never meets a test's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "noderuntime/network/net_system.h"

namespace kubicle::noderuntime::network {

// The 4 hex digits that name a node's host veths (kh<tag>-N) and host
// table (kubicle_<tag>): from the SHA-256 of its state directory as given,
// so nodes with distinct state directories keep apart on one host.
std::string SandboxNetworkTag(const std::string& state_dir);

class SandboxCidrLease {
 public:
  // The lowest free block that no route of the host overlaps (a leftover
  // of some other node, or a real network). ResourceExhausted if none.
  static Result<SandboxCidrLease> Take(NetSystem& host);
  const std::string& cidr() const { return cidr_; }

 private:
  UniqueFd lock_;  // the flock: released when this goes (or the process dies)
  std::string cidr_;
};

// The sandbox-network flags for a kubicle-node that a benchmark or test
// starts on a shared host: --sandbox-network-cidr of a lease taken into
// `*lease` (the caller keeps it while the node runs; one already there is
// reused), or --sandbox-network=off when this process is not root, as the
// network needs.
Result<std::vector<std::string>> SharedHostNetworkFlags(std::optional<SandboxCidrLease>* lease);

// Tears down what a node left on `host` when it was killed: its host veths
// kh<tag>-* (which takes their namespace ends), every namespace file under
// `netns_dir` (unmounted and removed) and its table `ip kubicle_<tag>`.
// Best effort: what is already gone is no error. `tag` as the node derives
// it (SandboxNetworkTag).
void RemoveNodeNetwork(NetSystem& host, const std::string& netns_dir, const std::string& tag);

}  // namespace kubicle::noderuntime::network
