// A sandbox's egress policy: what its guest may reach beyond its own
// namespace, from Sandbox spec.network (docs/api.md, docs/network.md):
//   {"egress": "internet"}   default: anywhere public, never link-local,
//                            the node, other sandboxes, loopback, multicast
//   {"egress": "none"}       nothing
//   {"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": [443]}, ...]}}
//                            only these blocks (and ports, TCP and UDP; no
//                            ports: every port), the never-list still first
//
// Contracts: parsing takes untrusted JSON (the API's body, a Kubernetes
// object) and refuses unknown keys, wrong types, bad CIDRs, ports outside
// 1..65535 and more than kMaxAllowRules rules or kMaxPortsPerRule ports,
// naming the bad field. ToJson gives the canonical form, which parses back
// to the same policy (records store it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "noderuntime/network/ipv4.h"

namespace kubicle::noderuntime::network {

enum class EgressMode { kInternet, kNone, kAllow };

struct AllowRule {
  Cidr cidr;
  std::vector<uint16_t> ports;  // empty: every port
  bool operator==(const AllowRule&) const = default;
};

struct EgressPolicy {
  EgressMode mode = EgressMode::kInternet;
  std::vector<AllowRule> allow;  // kAllow only; 1..kMaxAllowRules
  bool operator==(const EgressPolicy&) const = default;
};

inline constexpr size_t kMaxAllowRules = 64;
inline constexpr size_t kMaxPortsPerRule = 32;

// `network` is the value of spec.network; null means the default.
Result<EgressPolicy> ParseNetworkSpec(const nlohmann::json& network);
nlohmann::json ToJson(const EgressPolicy& policy);
// "internet", "none" or "allow(N rules)", for logs.
std::string Describe(const EgressPolicy& policy);

}  // namespace kubicle::noderuntime::network
