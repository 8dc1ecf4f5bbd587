#include "noderuntime/network/egress_policy.h"

namespace kubicle::noderuntime::network {
namespace {

using nlohmann::json;

Status Bad(const std::string& field, const std::string& why) {
  return Status::InvalidArgument("network." + field + ": " + why);
}

// Every key of `obj` is one of `known`.
Status OnlyKeys(const json& obj, std::initializer_list<const char*> known, const std::string& field) {
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) return Bad(field, "unknown key '" + key.substr(0, 40) + "'");
  }
  return Status::Ok();
}

Result<uint16_t> ParsePort(const json& j, const std::string& field) {
  // An integer only: 443.0 or "443" is a mistake, not a port.
  if (!j.is_number_integer()) return Bad(field, "a port is an integer 1..65535");
  const auto v = j.is_number_unsigned() ? int64_t(std::min<uint64_t>(j.get<uint64_t>(), 1 << 20))
                                        : j.get<int64_t>();
  if (v < 1 || v > 65535) return Bad(field, "port " + std::to_string(v) + " is outside 1..65535");
  return uint16_t(v);
}

Result<AllowRule> ParseRule(const json& j, const std::string& field) {
  if (!j.is_object()) return Bad(field, "a rule is an object {cidr, ports}");
  RETURN_IF_ERROR(OnlyKeys(j, {"cidr", "ports"}, field));
  auto cidr = j.find("cidr");
  if (cidr == j.end() || !cidr->is_string()) return Bad(field + ".cidr", "required, a string");
  AllowRule rule;
  auto parsed = ParseCidr(cidr->get<std::string>());
  if (!parsed.ok()) return Bad(field + ".cidr", parsed.status().message());
  rule.cidr = *parsed;
  auto ports = j.find("ports");
  if (ports == j.end()) return rule;
  if (!ports->is_array()) return Bad(field + ".ports", "a list of ports");
  if (ports->empty()) return Bad(field + ".ports", "empty; leave it out to allow every port");
  if (ports->size() > kMaxPortsPerRule)
    return Bad(field + ".ports", "more than " + std::to_string(kMaxPortsPerRule) + " ports");
  for (size_t i = 0; i < ports->size(); ++i) {
    ASSIGN_OR_RETURN(uint16_t p, ParsePort((*ports)[i], field + ".ports[" + std::to_string(i) + "]"));
    rule.ports.push_back(p);
  }
  return rule;
}

Result<EgressPolicy> ParseEgress(const json& j) {
  EgressPolicy p;
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "internet") return p;
    if (s == "none") {
      p.mode = EgressMode::kNone;
      return p;
    }
    return Bad("egress", "'" + s.substr(0, 40) + "' is not none, internet or {allow: [...]}");
  }
  if (!j.is_object()) return Bad("egress", "none, internet or {allow: [...]}");
  RETURN_IF_ERROR(OnlyKeys(j, {"allow"}, "egress"));
  auto allow = j.find("allow");
  if (allow == j.end() || !allow->is_array()) return Bad("egress.allow", "required, a list of rules");
  if (allow->empty()) return Bad("egress.allow", "empty; say egress: none to allow nothing");
  if (allow->size() > kMaxAllowRules)
    return Bad("egress.allow", "more than " + std::to_string(kMaxAllowRules) + " rules");
  p.mode = EgressMode::kAllow;
  for (size_t i = 0; i < allow->size(); ++i) {
    ASSIGN_OR_RETURN(AllowRule r, ParseRule((*allow)[i], "egress.allow[" + std::to_string(i) + "]"));
    p.allow.push_back(std::move(r));
  }
  return p;
}

}  // namespace

Result<EgressPolicy> ParseNetworkSpec(const json& network) {
  if (network.is_null()) return EgressPolicy{};
  if (!network.is_object()) return Status::InvalidArgument("network: an object {egress: ...}");
  RETURN_IF_ERROR(OnlyKeys(network, {"egress"}, "network"));
  auto egress = network.find("egress");
  if (egress == network.end()) return EgressPolicy{};
  return ParseEgress(*egress);
}

json ToJson(const EgressPolicy& policy) {
  switch (policy.mode) {
    case EgressMode::kInternet: return {{"egress", "internet"}};
    case EgressMode::kNone: return {{"egress", "none"}};
    case EgressMode::kAllow: break;
  }
  json rules = json::array();
  for (const AllowRule& r : policy.allow) {
    json rule = {{"cidr", r.cidr.ToString()}};
    if (!r.ports.empty()) rule["ports"] = r.ports;
    rules.push_back(std::move(rule));
  }
  return {{"egress", {{"allow", std::move(rules)}}}};
}

std::string Describe(const EgressPolicy& policy) {
  switch (policy.mode) {
    case EgressMode::kInternet: return "internet";
    case EgressMode::kNone: return "none";
    case EgressMode::kAllow: break;
  }
  return "allow(" + std::to_string(policy.allow.size()) + " rules)";
}

}  // namespace kubicle::noderuntime::network
