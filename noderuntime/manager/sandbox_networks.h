// SandboxNetworks: where the sandbox network (docs/network.md) meets
// sandboxes. The namespaces themselves are SandboxNetwork's
// (network/sandbox_network.h); here each create, fork child and run takes
// a slot with its egress policy and a fresh MAC, the VMM is told its
// attachment, a restarted node takes a running sandbox's slot back, and a
// bake gets a NIC. With the network off (--sandbox-network=off) there is
// no SandboxNetwork: sandboxes of templates baked without a NIC run
// without one, and a template baked with one is refused.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "noderuntime/network/net_system.h"
#include "noderuntime/network/sandbox_network.h"
#include "noderuntime/vmmhost/template_baker.h"
#include "vmm/control_protocol.h"

namespace kubicle::noderuntime {

// The node's sandbox network (docs/network.md): one namespace per sandbox.
struct SandboxNetworkConfig {
  // On by default, as kubicle-node's --sandbox-network: Open fails when the
  // host cannot give sandboxes their namespaces, never runs them without.
  bool enabled = true;
  std::string cidr = "10.200.0.0/16";  // cut into /30 slots; must not overlap the host's routes
  // The guest's resolvers (kubicle.dns= on a template's kernel command line).
  std::vector<std::string> nameservers = {"1.1.1.1", "8.8.8.8"};
  size_t pool_size = 4;   // namespaces kept built
  std::string netns_dir;  // empty: <state_dir>/netns
  // How the host is changed; null: LinuxNetSystem (FakeNetSystem in tests).
  std::shared_ptr<network::NetSystem> system;
};

class SandboxNetworks {
 public:
  struct Metrics {
    metrics::Family<metrics::Histogram>* slot_build_seconds = nullptr;
    metrics::Family<metrics::Counter>* slot_build_failures = nullptr;
    metrics::Family<metrics::Counter>* orphans_swept = nullptr;
  };
  // Checks the host and installs the host's side (nothing when `config` is
  // off). Its errors say what to grant, or to start with
  // --sandbox-network=off.
  static Result<std::unique_ptr<SandboxNetworks>> Open(SandboxNetworkConfig config,
                                                       const std::string& state_dir,
                                                       Metrics metrics);
  // After adoption: sweeps the orphans and builds a first slot.
  Status Start();
  // Null with the network off.
  network::SandboxNetwork* network() const { return network_.get(); }

  // A namespace for `sb` with `policy` and a fresh MAC, when its template
  // has a NIC: sets rec.info.network and holds_slot.
  Status Attach(ManagedSandbox& sb, const network::EgressPolicy& policy);
  // The VMM's view of it (nullopt: no NIC).
  static std::optional<vmm::control::NetAttachment> AttachmentOf(const ManagedSandbox& sb);
  // Re-adoption: takes back a running sandbox's slot.
  Status Adopt(ManagedSandbox& sb);
  // What a bake adds when the network is on: a slot (released by the
  // caller), the NIC and the guest's addresses on its command line.
  Result<std::optional<TemplateBaker::Nic>> BakeNic(std::optional<network::NetworkSlot>* slot);
  // The namespace file of `sb`'s network ("" when it has none); the port
  // forwarder enters it to reach the guest. Set before the sandbox runs and
  // never changed after, so it may be read without sb.mu once it runs.
  static std::string NetnsPathOf(const ManagedSandbox& sb);

 private:
  SandboxNetworks(SandboxNetworkConfig config, std::unique_ptr<network::SandboxNetwork> network)
      : config_(std::move(config)), network_(std::move(network)) {}

  const SandboxNetworkConfig config_;
  std::unique_ptr<network::SandboxNetwork> network_;  // null: off
};

}  // namespace kubicle::noderuntime
