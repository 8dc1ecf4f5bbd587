// Test fixture for SandboxManager kvm tests: a scratch state directory, a
// test-guest template baked once per test, a private cgroup parent, and
// counters for the resources a leak would show up in.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "noderuntime/manager/sandbox_manager.h"

namespace kubicle::noderuntime::testing {

class ManagerTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  NodeConfig Config() const;
  // Opens the manager (config_ as adjusted by the test) and bakes "tg".
  void OpenAndBake();
  Status Reopen();
  Result<TemplateInfo> WaitTemplate(const std::string& name);
  Result<SandboxInfo> Create(const std::string& id = "", Labels labels = {});

  size_t VmmProcesses() const;
  std::string DescribeVmmProcesses() const;
  static constexpr size_t kPoolVms = ~size_t{0};
  // Waits (up to 10 s) until exactly `vmms` VMM processes (kPoolVms: the
  // idle pool's) run under the state dir and `cgroups` VM cgroups exist.
  bool Quiesce(size_t vmms, size_t cgroups = 0);
  static size_t OpenFds();
  // "fd->target ..." of this process: what a leak check names.
  static std::string DescribeFds();
  // Entries under <state>/sandboxes and <state>/sock, idle pool sockets aside.
  size_t StateFiles() const;
  size_t Cgroups() const;  // VM groups of sandboxes (idle pool VMs' aside)
  bool real_cgroups() const { return real_cgroups_; }
  // What the sandbox network needs that this host lacks (not root, no
  // ip/nft, or KUBICLE_TEST_NO_NETWORK=1 by hand), or "" when nothing: a
  // test skips on that and nothing else.
  static std::string NetworkPrecondition();
  // Turns the sandbox network on in config_, over a namespace of the test's
  // own that plays the host (so nothing of the real host's network is
  // touched). Call only once NetworkPrecondition() is ""; an error then is
  // the product's (LinuxNetSystem), and the test fails on it.
  Status EnableNetwork();
  // In the network's host namespace and netns directory: this node's host
  // veths, its nftables tables, and namespace files (in use or pooled).
  size_t HostVeths() const;
  size_t HostNftTables() const;
  size_t NetnsFiles() const;

  std::string state_dir_;
  std::string host_netns_;  // set by EnableNetwork
  std::string cgroup_parent_;
  bool real_cgroups_ = false;
  NodeConfig config_;
  std::atomic<int64_t> clock_offset_s_{0};
  std::unique_ptr<metrics::Registry> metrics_;
  std::unique_ptr<SandboxManager> m_;
};

}  // namespace kubicle::noderuntime::testing
