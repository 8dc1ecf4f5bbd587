// Unit tests of the node network's pure parts: CIDRs, the slot address
// plan, spec.network and the nftables rulesets.
#include <gtest/gtest.h>

#include "noderuntime/network/address_plan.h"
#include "noderuntime/network/egress_policy.h"
#include "noderuntime/network/ipv4.h"
#include "noderuntime/network/ruleset.h"

namespace kubicle::noderuntime::network {
namespace {

using nlohmann::json;

Cidr C(const char* text) { return ParseCidr(text).value(); }

TEST(CidrTest, ParsesStrictly) {
  auto c = ParseCidr("10.200.0.0/16");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->base.value, 0x0ac80000u);
  EXPECT_EQ(c->prefix, 16);
  EXPECT_EQ(c->ToString(), "10.200.0.0/16");
  EXPECT_EQ(ParseCidr("0.0.0.0/0")->size(), uint64_t{1} << 32);
  EXPECT_EQ(ParseCidr("1.2.3.4", true)->prefix, 32);
  for (const char* bad : {"", "10.200.0.0", "10.200.0.0/", "10.200.0.0/33", "10.200.0.1/16",
                          "10.200.0/16", "10.200.0.0.0/16", "010.200.0.0/16", "10.256.0.0/16",
                          "10.200.0.0/016", "10.200.0.0/-1", " 10.200.0.0/16", "10.200.0.0/16 ",
                          "10.200.0.0/1a", "a.b.c.d/8", "10..0.0/16", "1.2.3.4/32/1"})
    EXPECT_FALSE(ParseCidr(bad).ok()) << bad;
  EXPECT_NE(ParseCidr("10.200.0.1/16").status().message().find("10.200.0.0/16"), std::string::npos)
      << "the error suggests the block meant";
}

TEST(CidrTest, ContainsAndOverlaps) {
  const Cidr net = C("10.200.0.0/16");
  EXPECT_TRUE(net.Contains(ParseIpv4("10.200.255.255").value()));
  EXPECT_FALSE(net.Contains(ParseIpv4("10.201.0.0").value()));
  EXPECT_TRUE(net.Overlaps(C("10.0.0.0/8")));
  EXPECT_TRUE(net.Overlaps(C("10.200.7.0/24")));
  EXPECT_TRUE(net.Overlaps(C("0.0.0.0/0")));
  EXPECT_FALSE(net.Overlaps(C("10.201.0.0/16")));
  EXPECT_FALSE(net.Overlaps(C("192.168.0.0/16")));
}

TEST(AddressPlanTest, SlotsAreDisjointSlash30s) {
  auto plan = AddressPlan::For(C("10.200.0.0/16"));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->slots(), 16384u);
  EXPECT_EQ(plan->Of(0).host.ToString(), "10.200.0.1");
  EXPECT_EQ(plan->Of(0).sandbox.ToString(), "10.200.0.2");
  EXPECT_EQ(plan->Of(1).host.ToString(), "10.200.0.5");
  EXPECT_EQ(plan->Of(16383).sandbox.ToString(), "10.200.255.254");
  for (uint32_t s : {0u, 1u, 63u, 64u, 16383u}) {
    const Cidr block{Ipv4{plan->Of(s).host.value & ~3u}, 30};
    EXPECT_TRUE(block.Contains(plan->Of(s).sandbox));
    EXPECT_TRUE(plan->cidr().Contains(plan->Of(s).sandbox));
    if (s > 0) {
      EXPECT_FALSE(block.Contains(plan->Of(s - 1).sandbox));
    }
  }
  EXPECT_EQ(AddressPlan::For(C("10.0.0.0/28"))->slots(), 4u);
  EXPECT_FALSE(AddressPlan::For(C("10.0.0.0/29")).ok());
  EXPECT_FALSE(AddressPlan::For(C("10.0.0.0/7")).ok());
}

TEST(EgressPolicyTest, ParsesTheThreeForms) {
  EXPECT_EQ(ParseNetworkSpec(json()).value(), EgressPolicy{});
  EXPECT_EQ(ParseNetworkSpec(json::object()).value(), EgressPolicy{});
  EXPECT_EQ(ParseNetworkSpec({{"egress", "internet"}})->mode, EgressMode::kInternet);
  EXPECT_EQ(ParseNetworkSpec({{"egress", "none"}})->mode, EgressMode::kNone);
  auto allow = ParseNetworkSpec(json::parse(
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": [443, 80]}, {"cidr": "9.9.9.9/32"}]}})"));
  ASSERT_TRUE(allow.ok()) << allow.status().ToString();
  EXPECT_EQ(allow->mode, EgressMode::kAllow);
  ASSERT_EQ(allow->allow.size(), 2u);
  EXPECT_EQ(allow->allow[0].cidr, C("1.2.3.0/24"));
  EXPECT_EQ(allow->allow[0].ports, (std::vector<uint16_t>{443, 80}));
  EXPECT_TRUE(allow->allow[1].ports.empty());
  // The canonical form parses back to the same policy.
  for (const EgressPolicy& p : {EgressPolicy{}, *ParseNetworkSpec({{"egress", "none"}}), *allow})
    EXPECT_EQ(ParseNetworkSpec(ToJson(p)).value(), p);
  EXPECT_EQ(Describe(*allow), "allow(2 rules)");
}

TEST(EgressPolicyTest, RefusesBadInput) {
  const char* bad[] = {
      R"("internet")",                                        // not an object
      R"({"egress": "everything"})",
      R"({"egress": 1})",
      R"({"egres": "none"})",                                 // unknown key
      R"({"egress": "none", "ingress": "none"})",
      R"({"egress": {"deny": []}})",
      R"({"egress": {"allow": []}})",                         // say none
      R"({"egress": {"allow": {}}})",
      R"({"egress": {"allow": ["1.2.3.0/24"]}})",
      R"({"egress": {"allow": [{"ports": [443]}]}})",         // no cidr
      R"({"egress": {"allow": [{"cidr": "1.2.3.4/24"}]}})",   // host bits
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/33"}]}})",
      R"({"egress": {"allow": [{"cidr": 16909056}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "port": 443}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": []}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": [0]}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": [65536]}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": [-1]}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": [443.0]}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": ["443"]}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": [18446744073709551615]}]}})",
      R"({"egress": {"allow": [{"cidr": "1.2.3.0/24", "ports": 443}]}})",
  };
  for (const char* text : bad) {
    auto p = ParseNetworkSpec(json::parse(text));
    EXPECT_FALSE(p.ok()) << text;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << text;
  }
  json many = {{"egress", {{"allow", json::array()}}}};
  for (size_t i = 0; i <= kMaxAllowRules; ++i) many["egress"]["allow"].push_back({{"cidr", "1.2.3.0/24"}});
  EXPECT_FALSE(ParseNetworkSpec(many).ok());
  many["egress"]["allow"].erase(0);
  EXPECT_TRUE(ParseNetworkSpec(many).ok()) << "exactly the limit is fine";
  json ports = json::array();
  for (size_t i = 0; i <= kMaxPortsPerRule; ++i) ports.push_back(1000 + i);
  EXPECT_FALSE(ParseNetworkSpec({{"egress", {{"allow", {{{"cidr", "1.2.3.0/24"}, {"ports", ports}}}}}}}).ok());
  // The error names the field.
  auto e = ParseNetworkSpec(json::parse(R"({"egress": {"allow": [{"cidr": "1.2.3.0/24"}, {"cidr": "x"}]}})"));
  EXPECT_NE(e.status().message().find("egress.allow[1].cidr"), std::string::npos) << e.status().ToString();
}

SandboxRulesetInputs Inputs() {
  return {C("10.200.0.0/16"), {ParseIpv4("192.0.2.2").value(), ParseIpv4("127.0.0.1").value(),
                               ParseIpv4("10.200.0.1").value()}};
}

// The rules of chain `egress`, one a line, without indentation.
std::vector<std::string> EgressRules(const std::string& ruleset) {
  std::vector<std::string> out;
  const size_t begin = ruleset.find("chain egress {\n");
  const size_t end = ruleset.find("  }\n", begin);
  std::string body = ruleset.substr(begin + 15, end - begin - 15);
  for (size_t p = 0; p < body.size();) {
    size_t nl = body.find('\n', p);
    std::string line = body.substr(p, nl - p);
    out.push_back(line.substr(line.find_first_not_of(' ')));
    p = nl + 1;
  }
  return out;
}

TEST(RulesetTest, NeverListComesFirstWhateverThePolicy) {
  const std::vector<std::string> never = {
      "ip daddr 0.0.0.0/8 reject",     "ip daddr 127.0.0.0/8 reject", "ip daddr 169.254.0.0/16 reject",
      "ip daddr 224.0.0.0/4 reject",   "ip daddr 240.0.0.0/4 reject", "ip daddr 10.200.0.0/16 reject",
      "ip daddr 192.0.2.2/32 reject",  // the node; its loopback and veth addresses are covered above
  };
  auto with = [&](std::vector<std::string> tail) {
    std::vector<std::string> v = never;
    v.insert(v.end(), tail.begin(), tail.end());
    return v;
  };
  EXPECT_EQ(EgressRules(RenderSandboxRuleset({}, Inputs())), with({"accept", "reject"}));
  EXPECT_EQ(EgressRules(RenderSandboxRuleset({EgressMode::kNone, {}}, Inputs())), with({"reject"}));
  EgressPolicy allow{EgressMode::kAllow, {{C("1.2.3.0/24"), {443, 8443}}, {C("169.254.169.254/32"), {}}}};
  EXPECT_EQ(EgressRules(RenderSandboxRuleset(allow, Inputs())),
            with({"ip daddr 1.2.3.0/24 meta l4proto { tcp, udp } th dport { 443, 8443 } accept",
                  // an allow rule cannot open what the never-list refused above it
                  "ip daddr 169.254.169.254/32 accept", "reject"}));
}

TEST(RulesetTest, SandboxTableShape) {
  const std::string r = RenderSandboxRuleset({}, Inputs());
  EXPECT_EQ(r.rfind("add table ip kubicle\ndelete table ip kubicle\ntable ip kubicle {\n", 0), 0u)
      << "replaces the table whole";
  EXPECT_NE(r.find("type filter hook forward priority filter; policy drop;\n"
                   "    ct state established,related accept\n"
                   "    iifname \"tap0\" oifname \"veth0\" jump egress\n"),
            std::string::npos);
  EXPECT_NE(r.find("type filter hook input priority filter; policy drop;"), std::string::npos);
  EXPECT_NE(r.find("oifname \"veth0\" ip saddr 172.16.0.2 masquerade"), std::string::npos);
}

TEST(RulesetTest, EgressUpdateReplacesOnlyTheEgressChain) {
  const EgressPolicy none{EgressMode::kNone, {}};
  const std::string u = RenderEgressUpdate(none, Inputs());
  EXPECT_EQ(u.rfind("flush chain ip kubicle egress\ntable ip kubicle {\n  chain egress {\n", 0), 0u) << u;
  EXPECT_EQ(EgressRules(u), EgressRules(RenderSandboxRuleset(none, Inputs())));
  EXPECT_EQ(u.find("hook"), std::string::npos) << "no base chain is touched";
}

TEST(RulesetTest, HostTable) {
  const std::string r = RenderHostRuleset("kubicle_ab12", C("10.200.0.0/16"), "khab12-*");
  EXPECT_EQ(r.rfind("add table ip kubicle_ab12\ndelete table ip kubicle_ab12\n", 0), 0u);
  EXPECT_NE(r.find("iifname \"khab12-*\" ct state established,related accept\n    iifname \"khab12-*\" drop"),
            std::string::npos);
  EXPECT_NE(r.find("iifname \"khab12-*\" ip daddr 10.200.0.0/16 drop"), std::string::npos);
  EXPECT_NE(r.find("ip saddr 10.200.0.0/16 oifname != \"khab12-*\" masquerade"), std::string::npos);
  EXPECT_EQ(RenderHostRulesetRemoval("kubicle_ab12"), "add table ip kubicle_ab12\ndelete table ip kubicle_ab12\n");
}

}  // namespace
}  // namespace kubicle::noderuntime::network
