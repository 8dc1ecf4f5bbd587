// The operator's status writes against crds/: every field each kind's
// computed status carries (conditions, phase, node, token, replicas,
// children, readyNodes, attachedTo) is declared by the CRD with that type.
// kube/api/crd_schema_test holds the reads and the node's writes.
#include <gtest/gtest.h>

#include "kube/api/testing/crd_schema.h"
#include "kube/time_format.h"
#include "operator/fork_reconciler.h"
#include "operator/sandbox_status.h"
#include "operator/template_reconciler.h"
#include "operator/workspace_status.h"

namespace kubicle::op {
namespace {

namespace crd = kube::api::testing;

Json Schema(std::string_view kind) {
  auto s = crd::LoadCrdSchema(KUBICLE_CRDS_DIR, kind);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : Json::object();
}

const kube::TimePoint kNow = *kube::ParseTime("2026-01-01T00:00:00Z");

void ExpectFits(std::string_view kind, const Json& status) {
  ASSERT_TRUE(status.is_object()) << kind;
  const auto problems = crd::WriteProblems(Schema(kind), Json{{"status", status}});
  EXPECT_TRUE(problems.empty()) << kind << ": " << JoinProblems(problems) << "\n" << status.dump();
}

Json Object(const std::string& name) {
  return Json{{"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", "u-" + name}, {"generation", 2}}}};
}

TEST(StatusSchemaTest, SandboxStatusFitsTheCrd) {
  Json obj = Object("s");
  obj["spec"] = {{"templateRef", {{"name", "t"}}}};
  obj["status"] = {{"vm", {{"state", "Running"}, {"endpoint", "10.0.0.1:7443"}}}};
  SandboxFacts running{.node = "n1", .expires = kNow + std::chrono::hours(1), .token_secret = "s-token",
                       .token_sha256 = "ab"};
  ExpectFits("Sandbox", ComputeSandboxStatus(SandboxView::Parse(obj), running, kNow));
  SandboxFacts pending{.schedule_reason = "Unschedulable", .schedule_message = "no node"};
  ExpectFits("Sandbox", ComputeSandboxStatus(SandboxView::Parse(Object("p")), pending, kNow));
}

TEST(StatusSchemaTest, TemplateStatusFitsTheCrd) {
  Json obj = Object("t");
  obj["status"] = {{"nodes", Json::array({{{"nodeName", "n1"}, {"phase", "Ready"}, {"observedGeneration", 2}}})}};
  const std::map<std::string, NodeInfo> nodes = {{"n1", NodeInfo{.name = "n1", .alive = true}}};
  const SandboxTemplateView t = SandboxTemplateView::Parse(obj);
  ExpectFits("SandboxTemplate", ComputeTemplateStatus(t, {}, nodes, kNow));
  ExpectFits("SandboxTemplate", ComputeTemplateStatus(t, {"spec.kernel: bad"}, nodes, kNow));
}

TEST(StatusSchemaTest, ForkStatusFitsTheCrd) {
  Json fork = Object("f");
  fork["spec"] = {{"sourceRef", {{"name", "s"}}}, {"replicas", 2}};
  Json child = Object("f-0");
  child["status"] = {{"phase", "Running"}, {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}};
  ExpectFits("SandboxFork", ComputeForkStatus(SandboxForkView::Parse(fork), "n1", {}, {child}, kNow));
  ExpectFits("SandboxFork",
             ComputeForkStatus(SandboxForkView::Parse(fork), "", {"SourceNotFound", "no source"}, {}, kNow));
}

TEST(StatusSchemaTest, WorkspaceStatusFitsTheCrd) {
  Json obj = Object("w");
  obj["spec"] = {{"sizeMiB", 64}};
  obj["status"] = {{"disk", {{"state", "Ready"}, {"bytesUsed", 4096}, {"attachedTo", "k-1"}}}};
  WorkspaceFacts placed{.node = "n1", .token_secret = "w-token", .token_sha256 = "ab", .holders = {"s"}};
  ExpectFits("Workspace", ComputeWorkspaceStatus(WorkspaceView::Parse(obj), placed, kNow));
}

TEST(StatusSchemaTest, AFieldTheCrdLacksIsNamed) {
  const auto problems = crd::WriteProblems(Schema("Sandbox"), Json{{"status", {{"phaseX", "Running"}}}});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("status.phaseX"), std::string::npos) << problems[0];
}

}  // namespace
}  // namespace kubicle::op
