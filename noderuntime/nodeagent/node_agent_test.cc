// The node agent's pure parts: names, the objects it writes, and how it
// reads Sandbox and SandboxTemplate objects (hostile shapes included).
#include <gtest/gtest.h>

#include "kube/time_format.h"
#include "noderuntime/node_util.h"
#include "noderuntime/nodeagent/lease_heartbeat.h"
#include "noderuntime/nodeagent/node_names.h"
#include "noderuntime/nodeagent/sandbox_sync.h"
#include "noderuntime/nodeagent/template_sync.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

constexpr char kUid[] = "0f8c3a52-6a8e-4c1e-9d0b-2f1f3c4d5e6f";

TEST(NodeNames, IdsAreDnsLabelsFromTheUid) {
  EXPECT_EQ(SandboxNodeId(kUid), std::string("k-") + kUid);
  EXPECT_TRUE(ValidateId(SandboxNodeId(kUid), "id").ok());
  const std::string t = TemplateNodeId(kUid, 3);
  EXPECT_EQ(t, std::string("t-") + kUid + "-g3");
  EXPECT_TRUE(ValidateId(t, "id").ok());
  const std::string v = TemplateNodeId(kUid, 3, ShapeOverride{262144, 64});
  EXPECT_TRUE(ValidateId(v, "id").ok()) << v;
  EXPECT_NE(v, t);
  // A huge generation still fits, keeping the prefix cleanup relies on.
  const std::string big = TemplateNodeId(kUid, INT64_MAX, ShapeOverride{262144, 64});
  EXPECT_TRUE(ValidateId(big, "id").ok()) << big;
  EXPECT_EQ(big.rfind(TemplateNodeIdPrefix(kUid), 0), 0u);
  EXPECT_NE(big, TemplateNodeId(kUid, INT64_MAX - 1, ShapeOverride{262144, 64}));
}

TEST(NodeNames, ShellJoinQuotesWhatAShellWouldInterpret) {
  EXPECT_EQ(ShellJoin({"echo", "warm"}), "echo warm");
  EXPECT_EQ(ShellJoin({"python3", "-c", "import os; print('x')"}),
            "python3 -c 'import os; print('\\''x'\\'')'");
  EXPECT_EQ(ShellJoin({"echo", ""}), "echo ''");
  EXPECT_EQ(ShellJoin({"a$(rm -rf /)"}), "'a$(rm -rf /)'");
}

TEST(LeaseHeartbeat, LeaseCarriesHolderDurationAndCapacity) {
  AgentConfig c;
  c.node_name = "kvm-1";
  c.capacity_sandboxes = 42;
  c.capacity_mem_mib = 2048;
  auto now = std::chrono::system_clock::now();
  kube::Json l = LeaseHeartbeat::LeaseFor(c, now);
  EXPECT_EQ(l["metadata"]["name"], "kubicle-node-kvm-1");
  EXPECT_EQ(l["metadata"]["namespace"], "kubicle-node-lease");
  EXPECT_EQ(l["metadata"]["labels"]["kubicle.dev/node"], "kvm-1");
  EXPECT_EQ(l["metadata"]["annotations"]["kubicle.dev/capacity-sandboxes"], "42");
  EXPECT_EQ(l["metadata"]["annotations"]["kubicle.dev/capacity-memory-mib"], "2048");
  EXPECT_EQ(l["spec"]["holderIdentity"], "kvm-1");
  EXPECT_EQ(l["spec"]["leaseDurationSeconds"], 40);
  auto renew = kube::ParseTime(l["spec"]["renewTime"].get<std::string>());
  ASSERT_TRUE(renew.ok());
  EXPECT_LT(std::chrono::abs(*renew - now), std::chrono::seconds(1));
  c.capacity_mem_mib = 0;
  EXPECT_FALSE(LeaseHeartbeat::LeaseFor(c, now)["metadata"]["annotations"].contains(
      "kubicle.dev/capacity-memory-mib"));
  EXPECT_FALSE(l["metadata"]["annotations"].contains("kubicle.dev/serving-ca")) << "plain HTTP";
  c.serving_ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  EXPECT_EQ(LeaseHeartbeat::LeaseFor(c, now)["metadata"]["annotations"]["kubicle.dev/serving-ca"],
            c.serving_ca_pem);
}

kube::Json Template() {
  return kube::Json::parse(R"({
    "metadata": {"name": "py", "namespace": "ns", "uid": "u1", "generation": 2},
    "spec": {"kernel": "/img/vmlinux", "initrd": "file:///img/initrd", "rootfs": "/img/root.ext4",
             "kernelArgs": "quiet=1", "vcpus": 2, "memoryMiB": 512,
             "warmup": [{"command": ["python3", "-c", "import json"]}, {"command": ["true"]}]},
    "status": {"nodes": [{"nodeName": "other", "phase": "Failed"},
                         {"nodeName": "kvm-1", "phase": "Ready", "observedGeneration": 2,
                          "snapshotDigest": "sha256:ab", "bakeSeconds": 1.5}]}})");
}

TEST(TemplateSync, SpecFromTemplateResolvesEveryImage) {
  std::vector<std::string> asked;
  auto spec = TemplateSpecFrom(Template(), "t-u1-g2", [&](const ImageSource& src) -> Result<std::string> {
    asked.push_back(src.field + "=" + src.source);
    return "/resolved/" + src.field;
  });
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(asked, (std::vector<std::string>{"kernel=/img/vmlinux", "initrd=file:///img/initrd",
                                             "rootfs=/img/root.ext4"}));
  EXPECT_EQ(spec->name, "t-u1-g2");
  EXPECT_EQ(spec->kernel, "/resolved/kernel");
  EXPECT_EQ(spec->initrd, "/resolved/initrd");
  EXPECT_EQ(spec->disks, (std::vector<std::string>{"/resolved/rootfs,ro"}));
  EXPECT_NE(spec->cmdline.find("console=ttyS0"), std::string::npos);
  EXPECT_EQ(spec->cmdline.substr(spec->cmdline.size() - 8), " quiet=1");
  EXPECT_EQ(spec->mem_mib, 512u);
  EXPECT_EQ(spec->vcpus, 2u);
  EXPECT_EQ(spec->warmup, (std::vector<std::string>{"python3 -c 'import json'", "true"}));
}

TEST(TemplateSync, SpecNetworkIsTheTemplatesEgress) {
  auto ok = [](const ImageSource&) -> Result<std::string> { return std::string("/x"); };
  auto dflt = TemplateSpecFrom(Template(), "t", ok);
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_EQ(dflt->network, network::EgressPolicy{}) << "none given: internet";
  kube::Json t = Template();
  t["spec"]["network"] = {{"egress", "none"}};
  auto none = TemplateSpecFrom(t, "t", ok);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->network.mode, network::EgressMode::kNone);
  t["spec"]["network"] = {{"egress", {{"allow", {{{"cidr", "10.0.0.1/8"}}}}}}};  // host bits set
  auto bad = TemplateSpecFrom(t, "t", ok);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("spec.network"), std::string::npos) << bad.status().ToString();
}

TEST(TemplateSync, AResolveErrorFailsTheSpecWithItsMessage) {
  auto spec = TemplateSpecFrom(Template(), "t", [](const ImageSource& src) -> Result<std::string> {
    if (src.field == "rootfs") return Status::PermissionDenied("rootfs \"/etc/shadow\" is outside");
    return std::string("/ok");
  });
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(spec.status().message().find("/etc/shadow"), std::string::npos);
}

TEST(TemplateSync, HostileShapesDoNotThrow) {
  auto ok = [](const ImageSource&) -> Result<std::string> { return std::string("/x"); };
  for (const char* text : {R"({})", R"({"spec": 7})", R"({"spec": {"kernel": 1, "warmup": "x"}})",
                           R"({"spec": {"warmup": [{"command": []}]}})",
                           R"({"spec": {"warmup": [{"command": [3]}]}})", R"({"status": {"nodes": 5}})",
                           R"({"status": {"nodes": [1, {"nodeName": 2}]}})"}) {
    kube::Json j = kube::Json::parse(text);
    (void)TemplateSpecFrom(j, "t", ok);
    EXPECT_FALSE(EntryOf(j, "kvm-1").has_value()) << text;
  }
  EXPECT_FALSE(TemplateSpecFrom(kube::Json::parse(R"({"spec": {"warmup": [{"command": [""]}]}})"), "t", ok).ok());
}

TEST(TemplateSync, EntryOfFindsThisNodesEntry) {
  auto e = EntryOf(Template(), "kvm-1");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(*e, (NodeEntry{"Ready", 2, "", "sha256:ab", 1.5}));
  EXPECT_FALSE(EntryOf(Template(), "kvm-2").has_value());
}

kube::Json Sandbox() {
  return kube::Json::parse(R"({
    "metadata": {"name": "agent-7", "namespace": "team-a", "uid": "0f8c3a52-6a8e-4c1e-9d0b-2f1f3c4d5e6f",
                 "labels": {"kubicle.dev/run": "r1", "kubicle.dev/node": "kvm-1"}},
    "spec": {"templateRef": {"name": "py"}, "env": [{"name": "GREETING", "value": "hi"}],
             "resources": {"memoryMiB": 1024, "vcpus": 2}},
    "status": {"tokenSha256": "abc"}})");
}

TEST(SandboxSync, DesiredVmFollowsTheObject) {
  auto d = DesiredVmOf(SandboxView::Parse(Sandbox()));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->spec.id, SandboxNodeId(kUid));
  EXPECT_EQ(d->spec.hostname, "agent-7");
  EXPECT_EQ(d->spec.token_sha256, "abc");
  EXPECT_EQ(d->spec.env, (Env{{"GREETING", "hi"}}));
  EXPECT_EQ(d->spec.labels.at("kubicle.dev/run"), "r1");
  EXPECT_EQ(d->spec.labels.at(kLabelSandboxUid), kUid);
  EXPECT_EQ(d->spec.labels.at(kLabelNamespace), "team-a");
  EXPECT_EQ(d->template_name, "py");
  ASSERT_TRUE(d->shape.has_value());
  EXPECT_EQ(*d->shape, (ShapeOverride{1024, 2}));
  EXPECT_TRUE(d->fork_source.empty());
}

TEST(SandboxSync, DesiredVmCarriesSpecNetwork) {
  EXPECT_FALSE(DesiredVmOf(SandboxView::Parse(Sandbox()))->spec.network) << "none given: the template's";
  kube::Json s = Sandbox();
  s["spec"]["network"] = {{"egress", {{"allow", {{{"cidr", "1.2.3.0/24"}, {"ports", {443}}}}}}}};
  auto d = DesiredVmOf(SandboxView::Parse(s));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE(d->spec.network);
  EXPECT_EQ(d->spec.network->mode, network::EgressMode::kAllow);
  ASSERT_EQ(d->spec.network->allow.size(), 1u);
  EXPECT_EQ(d->spec.network->allow[0].ports, std::vector<uint16_t>{443});
  s["spec"]["network"] = {{"egress", "everything"}};
  auto bad = DesiredVmOf(SandboxView::Parse(s));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("spec.network.egress"), std::string::npos) << bad.status().ToString();
}

TEST(SandboxSync, ADottedLongNameGetsTheIdAsHostname) {
  kube::Json s = Sandbox();
  s["metadata"]["name"] = std::string(200, 'a') + ".b.c";
  auto d = DesiredVmOf(SandboxView::Parse(s));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->spec.hostname, d->spec.id);
  s["metadata"].erase("uid");
  EXPECT_FALSE(DesiredVmOf(SandboxView::Parse(s)).ok());
}

TEST(SandboxSync, VmReportRoundTripsThroughTheMergePatch) {
  VmReport r{"Running", "10.0.0.7:7443", "", 4.5};
  kube::Json patch = kube::api::SandboxVmStatusPatch(r, std::chrono::system_clock::now());
  EXPECT_TRUE(patch["status"]["vm"]["message"].is_null());  // a merge patch null clears an old message
  kube::Json obj = {{"status", patch["status"]}};
  auto back = ReportedVm(SandboxView::Parse(obj).status);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, r);
  EXPECT_FALSE(ReportedVm(SandboxView::Parse(kube::Json::parse(R"({"status": {"vm": "x"}})")).status).has_value());
  kube::Json failed = kube::api::SandboxVmStatusPatch({"Failed", "", "boom", 0}, std::chrono::system_clock::now());
  EXPECT_TRUE(failed["status"]["vm"]["endpoint"].is_null());
  EXPECT_EQ(failed["status"]["vm"]["message"], "boom");
}

}  // namespace
}  // namespace kubicle::noderuntime::nodeagent
