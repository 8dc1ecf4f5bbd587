#include "noderuntime/network/ruleset.h"

#include <algorithm>

#include "noderuntime/network/guest_network.h"

namespace kubicle::noderuntime::network {
namespace {

Cidr Block(uint32_t a, uint32_t b, uint32_t c, uint32_t d, int prefix) {
  return {Ipv4{(a << 24) | (b << 16) | (c << 8) | d}, prefix};
}

std::string PortSet(const std::vector<uint16_t>& ports) {
  std::string s = "{ ";
  for (size_t i = 0; i < ports.size(); ++i) s += (i ? ", " : "") + std::to_string(ports[i]);
  return s + " }";
}

}  // namespace

std::vector<Cidr> NeverReachable(const SandboxRulesetInputs& in) {
  std::vector<Cidr> out = {
      Block(0, 0, 0, 0, 8),      // "this network"
      Block(127, 0, 0, 0, 8),    // loopback
      Block(169, 254, 0, 0, 16), // link-local: 169.254.169.254 is cloud metadata
      Block(224, 0, 0, 0, 4),    // multicast
      Block(240, 0, 0, 0, 4),    // reserved and limited broadcast
      in.sandbox_cidr,           // other sandboxes and every veth's host end
  };
  for (Ipv4 a : in.node_addresses) {
    const Cidr host{a, 32};
    const bool covered = std::any_of(out.begin(), out.end(), [&](const Cidr& c) { return c.Contains(a); });
    if (!covered) out.push_back(host);
  }
  return out;
}

namespace {

// Chain `egress`'s rules, one a line, each indented by four spaces.
std::string EgressRules(const EgressPolicy& policy, const SandboxRulesetInputs& in) {
  std::string t;
  for (const Cidr& c : NeverReachable(in)) t += "    ip daddr " + c.ToString() + " reject\n";
  switch (policy.mode) {
    case EgressMode::kInternet:
      t += "    accept\n";
      break;
    case EgressMode::kNone:
      break;
    case EgressMode::kAllow:
      for (const AllowRule& r : policy.allow) {
        t += "    ip daddr " + r.cidr.ToString();
        if (!r.ports.empty()) t += " meta l4proto { tcp, udp } th dport " + PortSet(r.ports);
        t += " accept\n";
      }
      break;
  }
  // Refused rather than dropped: the guest's connect fails at once instead
  // of hanging until its own timeout.
  t += "    reject\n";
  return t;
}

}  // namespace

std::string RenderSandboxRuleset(const EgressPolicy& policy, const SandboxRulesetInputs& in) {
  const std::string tap = kTapName;
  std::string t;
  // "add" then "delete" makes the delete valid whether or not it exists.
  t += "add table ip kubicle\n";
  t += "delete table ip kubicle\n";
  t += "table ip kubicle {\n";
  t += "  chain egress {\n";
  t += EgressRules(policy, in);
  t += "  }\n";
  t += "  chain forward {\n";
  t += "    type filter hook forward priority filter; policy drop;\n";
  t += "    ct state established,related accept\n";
  t += "    iifname \"" + tap + "\" oifname \"veth0\" jump egress\n";
  t += "  }\n";
  t += "  chain input {\n";
  t += "    type filter hook input priority filter; policy drop;\n";
  t += "    iifname \"lo\" accept\n";
  t += "    ct state established,related accept\n";
  t += "  }\n";
  t += "  chain postrouting {\n";
  t += "    type nat hook postrouting priority srcnat; policy accept;\n";
  t += "    oifname \"veth0\" ip saddr " + std::string(kGuestAddress) + " masquerade\n";
  t += "  }\n";
  t += "}\n";
  return t;
}

std::string RenderEgressUpdate(const EgressPolicy& policy, const SandboxRulesetInputs& in) {
  return "flush chain ip kubicle egress\ntable ip kubicle {\n  chain egress {\n" + EgressRules(policy, in) +
         "  }\n}\n";
}

std::string RenderHostRuleset(const std::string& table, const Cidr& sandbox_cidr,
                              const std::string& veth_glob) {
  const std::string cidr = sandbox_cidr.ToString(), veths = "\"" + veth_glob + "\"";
  std::string t;
  t += "add table ip " + table + "\n";
  t += "delete table ip " + table + "\n";
  t += "table ip " + table + " {\n";
  t += "  chain input {\n";
  t += "    type filter hook input priority filter; policy accept;\n";
  t += "    iifname " + veths + " ct state established,related accept\n";
  t += "    iifname " + veths + " drop\n";
  t += "  }\n";
  t += "  chain forward {\n";
  t += "    type filter hook forward priority filter; policy accept;\n";
  t += "    iifname " + veths + " ip daddr " + cidr + " drop\n";
  t += "  }\n";
  t += "  chain postrouting {\n";
  t += "    type nat hook postrouting priority srcnat; policy accept;\n";
  t += "    ip saddr " + cidr + " oifname != " + veths + " masquerade\n";
  t += "  }\n";
  t += "}\n";
  return t;
}

std::string RenderHostRulesetRemoval(const std::string& table) {
  return "add table ip " + table + "\ndelete table ip " + table + "\n";
}

}  // namespace kubicle::noderuntime::network
