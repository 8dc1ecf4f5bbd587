#include "operator/template_reconciler.h"

#include <gtest/gtest.h>

#include "operator/test_world.h"

namespace kubicle::op {
namespace {

using testing::kNs;

TEST(ValidateTemplateTest, SourcesMustBeAbsoluteOrUrls) {
  Json t = {{"spec", {{"kernel", "vmlinux"}, {"rootfs", "https://x/r.ext4"},
                      {"warmup", {{{"command", {""}}}}}}}};
  auto problems = ValidateTemplate(SandboxTemplateView::Parse(t));
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("spec.kernel"), std::string::npos);
  EXPECT_NE(problems[1].find("warmup[0]"), std::string::npos);
  t["spec"]["kernel"] = "/a/../etc/shadow";
  EXPECT_EQ(ValidateTemplate(SandboxTemplateView::Parse(t)).size(), 2u);
}

TEST(ValidateTemplateTest, ExactlyOneOfImageAndRootfs) {
  const Json image = {{"spec", {{"image", "reg.example:5000/team/py:3.12"}}}};
  EXPECT_TRUE(ValidateTemplate(SandboxTemplateView::Parse(image)).empty())
      << "an image template needs no kernel (the node's default) and no rootfs";
  Json both = image;
  both["spec"]["rootfs"] = "/r.ext4";
  auto problems = ValidateTemplate(SandboxTemplateView::Parse(both));
  ASSERT_EQ(problems.size(), 1u) << JoinProblems(problems);
  EXPECT_EQ(problems[0], "exactly one of spec.image and spec.rootfs is required");
  const Json neither = {{"spec", {{"kernel", "/k"}}}};
  EXPECT_EQ(ValidateTemplate(SandboxTemplateView::Parse(neither)), problems);
  const Json rootfs_only = {{"spec", {{"rootfs", "/r.ext4"}}}};
  EXPECT_TRUE(ValidateTemplate(SandboxTemplateView::Parse(rootfs_only)).empty());
}

TEST(ValidateTemplateTest, AnImageMustNameItsRegistry) {
  for (const char* ok : {"reg.example/a", "localhost/a:1", "127.0.0.1:5000/a/b@sha256:0123",
                         "registry:5000/team/x"}) {
    const Json t = {{"spec", {{"image", ok}}}};
    EXPECT_TRUE(ValidateTemplate(SandboxTemplateView::Parse(t)).empty()) << ok;
  }
  for (const char* bad : {"python:3.12", "library/python", "reg.example/", "reg.example",
                          "https://reg.example/a", "reg.example/a b", ""}) {
    const Json t = {{"spec", {{"image", bad}}}};
    auto problems = ValidateTemplate(SandboxTemplateView::Parse(t));
    ASSERT_EQ(problems.size(), 1u) << bad;
    EXPECT_EQ(problems[0].rfind("spec.image \"" + std::string(bad) + "\"", 0), 0u) << problems[0];
  }
}

TEST(ValidateTemplateTest, FieldsOfTheWrongTypeAreProblemsNotCrashes) {
  Json t = {{"spec", {{"kernel", 42}, {"rootfs", "/r"}, {"warmup", {{{"command", {7}}}, "x"}}}}};
  auto problems = ValidateTemplate(SandboxTemplateView::Parse(t));
  ASSERT_EQ(problems.size(), 5u) << JoinProblems(problems);
  EXPECT_EQ(problems[0], "spec.kernel: expected a string, got number");
  EXPECT_EQ(problems[1], "spec.warmup[0].command[0]: expected a string, got number");
  EXPECT_EQ(problems[2], "spec.warmup[1]: expected an object, got string");
  EXPECT_NE(problems[3].find("warmup[0].command[0] must name a program"), std::string::npos);
  EXPECT_NE(problems[4].find("warmup[1].command[0] must name a program"), std::string::npos);
}

TEST(TemplateReconcilerTest, AggregatesLiveNodesOfTheCurrentGeneration) {
  testing::World w;
  w.AddTemplate("py");
  w.Heartbeat("a", 10);
  w.Heartbeat("b", 10, 20);
  w.TemplateReady("py", "a");
  w.TemplateReady("py", "b");
  TemplateReconciler r(w.ctx);
  auto out = r.Reconcile(kube::ObjectKey(kNs, "py"));
  ASSERT_TRUE(out.ok());
  Json t = *w.client.Get(kube::SandboxTemplateResource(), kNs, "py");
  EXPECT_EQ(t["status"]["readyNodes"], 2);
  EXPECT_EQ(t["status"]["phase"], "Ready");
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(20)) << "when b's lease goes stale";
  EXPECT_EQ(t["status"]["nodes"].size(), 2u) << "node entries untouched";

  w.clock.Advance(std::chrono::seconds(21));
  ASSERT_TRUE(r.Reconcile(kube::ObjectKey(kNs, "py")).ok());
  t = *w.client.Get(kube::SandboxTemplateResource(), kNs, "py");
  EXPECT_EQ(t["status"]["readyNodes"], 1);

  // A spec change makes the old bakes stale until the nodes report again.
  ASSERT_TRUE(w.client.Patch(kube::SandboxTemplateResource(), kNs, "py", kube::PatchType::kMerge,
                             Json{{"spec", {{"memoryMiB", 512}}}}).ok());
  ASSERT_TRUE(r.Reconcile(kube::ObjectKey(kNs, "py")).ok());
  t = *w.client.Get(kube::SandboxTemplateResource(), kNs, "py");
  EXPECT_EQ(t["status"]["readyNodes"], 0);
  EXPECT_EQ(t["status"]["phase"], "Pending");
  EXPECT_EQ(t["status"]["observedGeneration"], 2);
}

TEST(TemplateReconcilerTest, HostileShapesAreReportedAsInvalid) {
  testing::World w;
  w.Heartbeat("a", 10);
  Json t = {{"metadata", {{"name", "odd"}}},
            {"spec", {{"kernel", {{"path", "/k"}}}, {"rootfs", "/r"}}}};
  ASSERT_TRUE(w.client.Create(kube::SandboxTemplateResource(), kNs, t).ok());
  ASSERT_TRUE(w.client.Patch(kube::SandboxTemplateResource(), kNs, "odd", kube::PatchType::kMerge,
                             Json{{"status", {{"nodes", "a"}, {"conditions", {1, 2}}}}}, "status")
                  .ok());
  ASSERT_TRUE(TemplateReconciler(w.ctx).Reconcile(kube::ObjectKey(kNs, "odd")).ok());
  Json got = *w.client.Get(kube::SandboxTemplateResource(), kNs, "odd");
  EXPECT_EQ(got["status"]["phase"], "Invalid");
  EXPECT_EQ(FindCondition(got, "Valid")->value("message", ""),
            "spec.kernel: expected a string, got object");
  EXPECT_EQ(got["status"]["conditions"].size(), 5u)
      << "garbage entries dropped (Valid, Ready, Reconciling, Stalled, RunToken)";
}

TEST(TemplateReconcilerTest, InvalidSpecIsReported) {
  testing::World w;
  Json t = {{"metadata", {{"name", "bad"}}}, {"spec", {{"kernel", "relative"}, {"rootfs", "/r"}}}};
  ASSERT_TRUE(w.client.Create(kube::SandboxTemplateResource(), kNs, t).ok());
  ASSERT_TRUE(TemplateReconciler(w.ctx).Reconcile(kube::ObjectKey(kNs, "bad")).ok());
  Json got = *w.client.Get(kube::SandboxTemplateResource(), kNs, "bad");
  EXPECT_EQ(got["status"]["phase"], "Invalid");
  EXPECT_EQ(FindCondition(got, "Valid")->value("reason", ""), "InvalidSpec");
}

}  // namespace
}  // namespace kubicle::op
