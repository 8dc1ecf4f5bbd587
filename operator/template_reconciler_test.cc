#include "operator/template_reconciler.h"

#include <gtest/gtest.h>

#include "operator/test_world.h"

namespace kubicle::op {
namespace {

using testing::kNs;

TEST(ValidateTemplateTest, SourcesMustBeAbsoluteOrUrls) {
  Json t = {{"spec", {{"kernel", "vmlinux"}, {"rootfs", "https://x/r.ext4"},
                      {"warmup", {{{"command", {""}}}}}}}};
  auto problems = ValidateTemplate(t);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("spec.kernel"), std::string::npos);
  EXPECT_NE(problems[1].find("warmup[0]"), std::string::npos);
  t["spec"]["kernel"] = "/a/../etc/shadow";
  EXPECT_EQ(ValidateTemplate(t).size(), 2u);
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
