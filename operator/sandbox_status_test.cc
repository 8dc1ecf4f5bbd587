#include "operator/sandbox_status.h"

#include <gtest/gtest.h>

#include "kube/time_format.h"

namespace kubicle::op {
namespace {

kube::TimePoint T(const char* s) { return *kube::ParseTime(s); }

Json Sbx(Json spec) {
  return Json{{"metadata", {{"name", "s"}, {"generation", 3}, {"creationTimestamp", "2026-01-01T00:00:00Z"}}},
              {"spec", spec}};
}
SandboxView V(Json sbx) { return SandboxView::Parse(std::move(sbx)); }

TEST(ComputeExpiryTest, AbsoluteTtlDefaultAndNever) {
  EXPECT_EQ(ComputeExpiry(V(Sbx({{"expiresAt", "2026-01-02T00:00:00Z"}})), std::chrono::hours(1)),
            T("2026-01-02T00:00:00Z"));
  EXPECT_EQ(ComputeExpiry(V(Sbx({{"ttlSeconds", 90}})), std::chrono::hours(1)), T("2026-01-01T00:01:30Z"));
  EXPECT_EQ(ComputeExpiry(V(Sbx(Json::object())), std::chrono::hours(1)), T("2026-01-01T01:00:00Z"));
  EXPECT_EQ(ComputeExpiry(V(Sbx(Json::object())), kube::Duration::zero()), std::nullopt);
  // An unreadable TTL is no TTL: the default applies, the Sandbox never leaks.
  EXPECT_EQ(ComputeExpiry(V(Sbx({{"ttlSeconds", "90"}})), std::chrono::hours(1)),
            T("2026-01-01T01:00:00Z"));
  EXPECT_EQ(ComputeExpiry(V(Json::array()), std::chrono::hours(1)), std::nullopt)
      << "no creation time";
}

TEST(ComputeSandboxStatusTest, PhasesFromPlacementAndVmState) {
  Json s = Sbx(Json::object());
  EXPECT_EQ(ComputePhase(V(s), ""), "Pending");
  EXPECT_EQ(ComputePhase(V(s), "n"), "Scheduled");
  s["status"]["vm"]["state"] = "Restoring";
  EXPECT_EQ(ComputePhase(V(s), "n"), "Starting");
  s["status"]["vm"]["state"] = "Running";
  EXPECT_EQ(ComputePhase(V(s), "n"), "Running");
  s["status"]["vm"]["state"] = "Failed";
  EXPECT_EQ(ComputePhase(V(s), "n"), "Failed");
  s["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_EQ(ComputePhase(V(s), "n"), "Terminating");
}

// spec.suspend: the node reports vm Suspended, the phase follows, the
// Sandbox keeps its node and expiry, and a Suspended condition appears only
// once suspend was asked for.
TEST(ComputeSandboxStatusTest, SuspendedPhaseAndCondition) {
  auto cond = [](const Json& st, const std::string& type) {
    for (const Json& c : st["conditions"])
      if (c["type"] == type) return c;
    return Json();
  };
  Json s = Sbx({{"ttlSeconds", 60}});
  SandboxFacts f;
  f.node = "n";
  f.expires = T("2026-01-01T00:01:00Z");
  s["status"] = {{"vm", {{"state", "Running"}}}};
  Json st = ComputeSandboxStatus(V(s), f, T("2026-01-01T00:00:01Z"));
  EXPECT_TRUE(cond(st, "Suspended").is_null()) << "never suspended: no condition";
  s["spec"]["suspend"] = true;
  st = ComputeSandboxStatus(V(s), f, T("2026-01-01T00:00:02Z"));
  EXPECT_EQ(st["phase"], "Running");
  EXPECT_EQ(cond(st, "Suspended")["reason"], "Suspending");
  s["status"] = st;
  s["status"]["vm"] = {{"state", "Suspended"}};
  EXPECT_EQ(ComputePhase(V(s), "n"), "Suspended");
  st = ComputeSandboxStatus(V(s), f, T("2026-01-01T00:00:03Z"));
  EXPECT_EQ(st["phase"], "Suspended");
  EXPECT_EQ(st["nodeName"], "n");
  EXPECT_EQ(st["expiresAt"], "2026-01-01T00:01:00Z");  // the TTL keeps counting
  EXPECT_EQ(cond(st, "Suspended")["status"], "True");
  EXPECT_EQ(cond(st, "Ready")["reason"], "Suspended");
  s["status"] = st;
  s["status"]["vm"] = {{"state", "Suspended"}};
  s["spec"]["suspend"] = false;
  st = ComputeSandboxStatus(V(s), f, T("2026-01-01T00:00:04Z"));
  EXPECT_EQ(cond(st, "Suspended")["reason"], "Resuming");
  s["status"] = st;
  s["status"]["vm"] = {{"state", "Running"}};
  st = ComputeSandboxStatus(V(s), f, T("2026-01-01T00:00:05Z"));
  EXPECT_EQ(st["phase"], "Running");
  EXPECT_EQ(cond(st, "Suspended")["status"], "False");
  EXPECT_EQ(cond(st, "Suspended")["reason"], "Resumed");
  // A suspend that is not a boolean is a spec problem, and no suspend.
  Json bad = Sbx({{"suspend", "yes"}});
  EXPECT_FALSE(V(bad).spec.suspend);
  EXPECT_FALSE(V(bad).problems.empty());
}

TEST(ComputeSandboxStatusTest, ConditionsCarryGenerationAndKeepTransitionTimes) {
  Json s = Sbx({{"ttlSeconds", 60}});
  SandboxFacts f;
  f.schedule_reason = "NoReadyNode";
  f.schedule_message = "none";
  f.expires = T("2026-01-01T00:01:00Z");
  Json st = ComputeSandboxStatus(V(s), f, T("2026-01-01T00:00:01Z"));
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_EQ(st["observedGeneration"], 3);
  EXPECT_EQ(st["expiresAt"], "2026-01-01T00:01:00Z");
  EXPECT_FALSE(st.contains("nodeName"));
  s["status"] = st;
  // Same facts later: identical status (nothing to write).
  EXPECT_EQ(ComputeSandboxStatus(V(s), f, T("2026-01-01T00:00:30Z")), st);
  f.node = "n";
  Json st2 = ComputeSandboxStatus(V(s), f, T("2026-01-01T00:00:40Z"));
  for (const Json& c : st2["conditions"]) {
    if (c["type"] == "Scheduled") {
      EXPECT_EQ(c["status"], "True");
      EXPECT_EQ(c["lastTransitionTime"], "2026-01-01T00:00:40Z");
    }
    if (c["type"] == "Expired") {
      EXPECT_EQ(c["lastTransitionTime"], "2026-01-01T00:00:01Z");
    }
    EXPECT_EQ(c["observedGeneration"], 3);
  }
}

}  // namespace
}  // namespace kubicle::op
