// The nftables rulesets of the node's sandbox network (docs/network.md,
// "Policy"), rendered as text for `nft -f -`. Pure functions, so every rule
// is checked by a unit test without a kernel.
//
// In each sandbox namespace, table `ip kubicle`:
//  - forward from tap0 to veth0 is the guest's egress: first the never-list
//    (0/8, loopback, link-local with the cloud metadata address,
//    multicast and reserved, the node's own addresses, the whole sandbox
//    CIDR: other sandboxes and the host ends of their veths), then the
//    policy (internet: the rest; none: nothing; allow: its rules);
//    replies to what is allowed come back through conntrack;
//  - nothing reaches the namespace itself (input), except replies;
//  - the guest's address is masqueraded out of veth0.
// On the host, table `ip kubicle_<tag>` masquerades the sandbox CIDR out
// of every other interface and keeps the veths from opening connections to
// the host itself or across to each other (in case a namespace's own table
// were ever missing).
// Rendering is whole-table and idempotent: the text first deletes the
// table it defines, so applying it again replaces it atomically.
#pragma once

#include <string>
#include <vector>

#include "noderuntime/network/egress_policy.h"
#include "noderuntime/network/ipv4.h"

namespace kubicle::noderuntime::network {

struct SandboxRulesetInputs {
  Cidr sandbox_cidr;                // the node's --sandbox-network-cidr
  std::vector<Ipv4> node_addresses; // the host's own IPv4 addresses
};

// The blocks no policy opens, in rule order.
std::vector<Cidr> NeverReachable(const SandboxRulesetInputs& in);

std::string RenderSandboxRuleset(const EgressPolicy& policy, const SandboxRulesetInputs& in);
// Replaces only chain `egress` of a table RenderSandboxRuleset made, in one
// transaction: what a policy change needs, without unregistering and
// registering the base chains again (several times cheaper).
std::string RenderEgressUpdate(const EgressPolicy& policy, const SandboxRulesetInputs& in);

// `veth_glob` matches the host ends of this node's veths ("khab12-*").
std::string RenderHostRuleset(const std::string& table, const Cidr& sandbox_cidr,
                              const std::string& veth_glob);
// Removes the host table (at a clean shutdown of the network).
std::string RenderHostRulesetRemoval(const std::string& table);

}  // namespace kubicle::noderuntime::network
