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
