#include "noderuntime/api/codec.h"

#include <gtest/gtest.h>

namespace kubicle::noderuntime::api {
namespace {

using guest::protocol::Bytes;

TEST(Utf8, AcceptsTextRejectsBinary) {
  auto b = [](std::string s) { return Bytes(s.begin(), s.end()); };
  EXPECT_TRUE(IsValidUtf8(b("hello \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80")));
  EXPECT_FALSE(IsValidUtf8(b("\xff")));
  EXPECT_FALSE(IsValidUtf8(b("\xc3")));           // truncated
  EXPECT_FALSE(IsValidUtf8(b("\xc0\xaf")));       // overlong
  EXPECT_FALSE(IsValidUtf8(b("\xed\xa0\x80")));   // surrogate
}

TEST(Ids, Dns1123Labels) {
  EXPECT_TRUE(ValidId("a"));
  EXPECT_TRUE(ValidId("sbx-1"));
  EXPECT_FALSE(ValidId(""));
  EXPECT_FALSE(ValidId("-a"));
  EXPECT_FALSE(ValidId("A"));
  EXPECT_FALSE(ValidId("a_b"));
  EXPECT_FALSE(ValidId(std::string(64, 'a')));
}

TEST(Labels, KubernetesSyntax) {
  EXPECT_TRUE(ValidateLabels({{"kubicle.dev/run", "r1"}, {"tier", ""}}).ok());
  EXPECT_FALSE(ValidateLabels({{"bad key", "x"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"a", "bad value"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"Bad_Prefix/x", "y"}}).ok());
}

TEST(SandboxSpec, ParsesAndRejects) {
  auto ok = SandboxSpecFromJson(json::parse(
      R"({"template":"t","id":"s1","labels":{"a":"b"},"ttlSeconds":60,"hostname":"h"})"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->template_name, "t");
  EXPECT_EQ(ok->id, "s1");
  EXPECT_EQ(ok->labels.at("a"), "b");
  EXPECT_EQ(*ok->ttl_seconds, 60);
  for (const char* bad : {R"({})", R"({"template":1})", R"({"template":"t","ttlSeconds":"x"})",
                          R"({"template":"t","ttlSeconds":0})", R"({"template":"t","id":"Bad"})",
                          R"({"template":"t","labels":{"a":1}})", R"({"template":"t","tmpl":"x"})",
                          R"({"template":"t","ttlSeconds":1.5})",
                          R"({"template":"t","ttlSeconds":18446744073709551615})"}) {
    auto r = SandboxSpecFromJson(json::parse(bad));
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto typo = SandboxSpecFromJson(json::parse(R"({"template":"t","ttl":5})"));
  EXPECT_NE(typo.status().message().find("\"ttl\""), std::string::npos);
}

TEST(SandboxSpec, NetworkIsParsedStrictly) {
  auto none = SandboxSpecFromJson(json::parse(R"({"template":"t"})"));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->network) << "none given: the template's";
  auto null = SandboxSpecFromJson(json::parse(R"({"template":"t","network":null})"));
  ASSERT_TRUE(null.ok());
  EXPECT_FALSE(null->network);
  auto allow = SandboxSpecFromJson(json::parse(
      R"({"template":"t","network":{"egress":{"allow":[{"cidr":"10.1.0.0/16","ports":[5432]}]}}})"));
  ASSERT_TRUE(allow.ok()) << allow.status().ToString();
  ASSERT_TRUE(allow->network);
  EXPECT_EQ(allow->network->mode, network::EgressMode::kAllow);
  for (const char* bad : {R"({"template":"t","network":"none"})",
                          R"({"template":"t","network":{"egress":"nope"}})",
                          R"({"template":"t","network":{"egress":{"allow":[{"cidr":"10.1.0.1/16"}]}}})",
                          R"({"template":"t","network":{"egress":{"allow":[{"cidr":"10.1.0.0/16","ports":[0]}]}}})",
                          R"({"template":"t","network":{"egress":"none","extra":1}})"}) {
    auto r = SandboxSpecFromJson(json::parse(bad));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(TemplateSpec, NetworkIsTheEgressOfItsSandboxesAndRuns) {
  auto dflt = TemplateSpecFromJson(json::parse(R"({"kernel":"/k"})"), "t");
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_EQ(dflt->network, network::EgressPolicy{}) << "default: internet";
  auto none = TemplateSpecFromJson(json::parse(R"({"kernel":"/k","network":{"egress":"none"}})"), "t");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->network.mode, network::EgressMode::kNone);
  EXPECT_EQ(ToJson(*none)["network"]["egress"], "none");
  EXPECT_EQ(TemplateSpecFromJson(json::parse(R"({"kernel":"/k","network":{"egress":"nope"}})"), "t")
                .status().code(), StatusCode::kInvalidArgument);
  // A run takes its template's egress: the run token cannot widen it.
  auto run = RunOptionsFromJson("t", json::parse(R"({"argv":["true"],"network":{"egress":"internet"}})"));
  EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument) << run.status().ToString();
}

TEST(Json, SandboxNetworkShowsPolicyAndMac) {
  SandboxInfo info;
  EXPECT_TRUE(ToJson(info, false)["network"].is_null());
  info.network = SandboxNetworkInfo{"/s/netns/slot-1", 1, "02:00:00:00:00:07", {network::EgressMode::kNone, {}}};
  json j = ToJson(info, false);
  EXPECT_EQ(j["network"], json::parse(R"({"egress":"none","mac":"02:00:00:00:00:07"})"));
  EXPECT_EQ(j.dump().find("slot-1"), std::string::npos) << "the namespace path is the node's own";
}

TEST(TemplateSpec, NameMustMatchUrl) {
  auto ok = TemplateSpecFromJson(json::parse(R"({"kernel":"/k","memMib":64,"warmup":["a"]})"), "t");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->name, "t");
  EXPECT_EQ(ok->mem_mib, 64u);
  EXPECT_FALSE(TemplateSpecFromJson(json::parse(R"({"kernel":"/k","name":"u"})"), "t").ok());
  EXPECT_FALSE(TemplateSpecFromJson(json::parse(R"({"name":"t"})"), "t").ok());
  EXPECT_FALSE(TemplateSpecFromJson(json::parse(R"({"kernel":"/k","vcpus":0})"), "t").ok());
  EXPECT_FALSE(TemplateSpecFromJson(json::parse(R"({"kernel":"/k","disks":"x"})"), "t").ok());
}

TEST(ExecOptions, ArgvXorShellAndStdin) {
  auto ok = ExecOptionsFromJson(
      json::parse(R"({"argv":["cat"],"stdinBase64":"aGk=","timeoutSeconds":5,"env":["A=1"]})"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->request.stdin_data, (Bytes{'h', 'i'}));
  EXPECT_EQ(ok->timeout, std::chrono::seconds(5));
  EXPECT_EQ(ok->request.timeout_ms, 5000u);
  EXPECT_FALSE(ExecOptionsFromJson(json::parse(R"({})")).ok());
  EXPECT_FALSE(ExecOptionsFromJson(json::parse(R"({"argv":[]})")).ok());
  EXPECT_FALSE(ExecOptionsFromJson(json::parse(R"({"argv":["a"],"shell":"b"})")).ok());
  EXPECT_FALSE(ExecOptionsFromJson(json::parse(R"({"argv":["a"],"stdinBase64":"!"})")).ok());
  EXPECT_FALSE(ExecOptionsFromJson(json::parse(R"({"argv":["a"],"env":["NOEQ"]})")).ok());
}

TEST(ForkRequest, CountRange) {
  EXPECT_EQ(ForkRequestFromJson(json::parse(R"({})"), "s")->count, 1u);
  EXPECT_EQ(ForkRequestFromJson(json::parse(R"({"count":64})"), "s")->count, 64u);
  EXPECT_FALSE(ForkRequestFromJson(json::parse(R"({"count":0})"), "s").ok());
  EXPECT_FALSE(ForkRequestFromJson(json::parse(R"({"count":65})"), "s").ok());
}

TEST(ExecResultJson, TextOrBase64) {
  guest::client::ExecResult r;
  r.exit_code = 0;
  r.stdout_data = {'h', 'i'};
  auto j = ExecResultToJson(r);
  EXPECT_EQ(j["encoding"], "utf-8");
  EXPECT_EQ(j["stdout"], "hi");
  EXPECT_TRUE(j["signal"].is_null());
  r.stderr_data = {0xff};
  j = ExecResultToJson(r);
  EXPECT_EQ(j["encoding"], "base64");
  EXPECT_EQ(j["stdout"], "aGk=");
  EXPECT_EQ(j["stderr"], "/w==");
}

TEST(Json, SandboxTokenOnlyWhenAsked) {
  SandboxInfo info;
  info.id = "s";
  info.token = "secret";
  info.created_at = WallTime(std::chrono::milliseconds(1764687845123));
  EXPECT_FALSE(ToJson(info, false).contains("token"));
  EXPECT_EQ(ToJson(info, true)["token"], "secret");
  EXPECT_EQ(ToJson(info, false)["createdAt"], "2025-12-02T15:04:05.123Z");
  EXPECT_EQ(ToJson(info, false)["state"], "Creating");
}

TEST(ParseJsonObject, RejectsNonObjects) {
  EXPECT_FALSE(ParseJsonObject("{").ok());
  EXPECT_FALSE(ParseJsonObject("[]").ok());
  EXPECT_FALSE(ParseJsonObject("").ok());
  EXPECT_TRUE(ParseJsonObject("{}").ok());
}

}  // namespace
}  // namespace kubicle::noderuntime::api
