// The Reconciling/Stalled/Ready conditions and observedGeneration of every
// phase of every kind (health_phases.h). What kstatus and Argo CD compute
// from these objects is checked with the real library and interpreter by
// CTest health_phases (e2e/health).
#include "operator/health_phases.h"

#include <gtest/gtest.h>

#include <set>

#include "kube/time_format.h"
#include "operator/sandbox_status.h"
#include "operator/workspace_status.h"

namespace kubicle::op {
namespace {

Json Cond(const Json& obj, std::string_view type) {
  auto c = FindCondition(obj, type);
  return c ? *c : Json();
}
std::string StatusOf(const Json& obj, std::string_view type) {
  const Json c = Cond(obj, type);
  return c.is_object() ? c.value("status", "") : "";
}

}  // namespace

// Names the case in failure messages instead of dumping its bytes.
void PrintTo(const HealthCase& c, std::ostream* os) { *os << c.kind << " " << c.phase; }

namespace {

class HealthPhasesTest : public ::testing::TestWithParam<HealthCase> {};

TEST_P(HealthPhasesTest, ConditionsSayWhatTheToolsMustCompute) {
  const HealthCase& c = GetParam();
  const Json& obj = c.object;
  if (obj["status"].value("observedGeneration", -1) == 0) {  // no operator pass yet
    EXPECT_EQ(c.kstatus, "InProgress");
    return;
  }
  const Json reconciling = Cond(obj, "Reconciling"), stalled = Cond(obj, "Stalled");
  ASSERT_TRUE(reconciling.is_object() && stalled.is_object()) << obj.dump(2);
  ASSERT_TRUE(Cond(obj, "Ready").is_object());
  EXPECT_FALSE(StatusOf(obj, "Reconciling") == "True" && StatusOf(obj, "Stalled") == "True")
      << "kstatus takes the first True of the two";
  const bool observed = obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
  for (const Json& cond : obj["status"]["conditions"]) {
    EXPECT_FALSE(cond.value("reason", "").empty()) << cond.dump();
    EXPECT_FALSE(cond.value("message", "").empty()) << cond.dump();
    EXPECT_EQ(cond["observedGeneration"], obj["status"]["observedGeneration"]);
  }
  if (c.kstatus == "Failed") {
    EXPECT_EQ(StatusOf(obj, "Stalled"), "True");
    EXPECT_EQ(StatusOf(obj, "Reconciling"), "False");
    EXPECT_EQ(stalled["reason"], Cond(obj, "Ready")["reason"]) << "the reason a pipeline shows";
    EXPECT_EQ(stalled["message"], Cond(obj, "Ready")["message"]);
  } else {
    EXPECT_EQ(StatusOf(obj, "Stalled"), "False");
  }
  if (c.kstatus == "Current") {
    EXPECT_TRUE(observed);
    EXPECT_EQ(StatusOf(obj, "Ready"), "True");
    EXPECT_EQ(StatusOf(obj, "Reconciling"), "False");
  }
  if (c.kstatus == "InProgress") {
    EXPECT_TRUE(!observed || StatusOf(obj, "Reconciling") == "True" || StatusOf(obj, "Ready") == "False");
  }
  if (c.kstatus == "Terminating") {
    EXPECT_EQ(StatusOf(obj, "Reconciling"), "True");
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, HealthPhasesTest, ::testing::ValuesIn(HealthCases()),
                         [](const ::testing::TestParamInfo<HealthCase>& info) {
                           std::string n = info.param.kind + "_" + info.param.phase;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n + "_" + std::to_string(info.index);
                         });

TEST(HealthPhasesCatalogue, EveryKindReachesEveryAnswer) {
  std::map<std::string, std::set<std::string>> seen;
  for (const HealthCase& c : HealthCases()) seen[c.kind].insert(c.kstatus);
  for (const char* kind : {"Sandbox", "SandboxTemplate", "SandboxFork", "Workspace"}) {
    EXPECT_TRUE(seen[kind].count("InProgress")) << kind;
    EXPECT_TRUE(seen[kind].count("Current")) << kind;
    EXPECT_TRUE(seen[kind].count("Failed")) << kind;
  }
}

const HealthCase& Find(const std::string& kind, const std::string& phase) {
  static const std::vector<HealthCase> all = HealthCases();
  for (const HealthCase& c : all)
    if (c.kind == kind && c.phase == phase) return c;
  ADD_FAILURE() << "no case " << kind << " " << phase;
  return all.front();
}

TEST(HealthPhasesReasons, FailuresCarryWhatTheNodeSaid) {
  EXPECT_EQ(Cond(Find("Sandbox", "Failed (VM died)").object, "Stalled")["message"],
            "kubicle-vmm exited: killed by signal 9");
  EXPECT_EQ(Cond(Find("Sandbox", "Failed (VM died)").object, "Stalled")["reason"], "VMFailed");
  EXPECT_EQ(Cond(Find("Sandbox", "Failed (node lost)").object, "Stalled")["reason"], "NodeLost");
  const Json t = Cond(Find("SandboxTemplate", "Failed (cannot bake)").object, "Stalled");
  EXPECT_EQ(t["reason"], "BakeFailed");
  EXPECT_NE(t["message"].get<std::string>().find("kvm-1: kernel /nonexistent/vmlinux"), std::string::npos)
      << t.dump();
  EXPECT_EQ(Cond(Find("SandboxTemplate", "Invalid").object, "Stalled")["reason"], "InvalidSpec");
  EXPECT_EQ(Cond(Find("SandboxFork", "Failed (a child failed)").object, "Stalled")["reason"], "ForkFailed");
  EXPECT_EQ(Cond(Find("SandboxFork", "Pending (name taken)").object, "Stalled")["reason"], "NameConflict");
  EXPECT_EQ(Cond(Find("Workspace", "Failed (disk)").object, "Stalled")["message"],
            "mkfs: no space left on device");
  EXPECT_EQ(Cond(Find("Sandbox", "Suspending").object, "Reconciling")["reason"], "Suspending");
  EXPECT_EQ(Cond(Find("Sandbox", "Resuming").object, "Reconciling")["reason"], "Resuming");
  EXPECT_EQ(Cond(Find("Sandbox", "Starting").object, "Reconciling")["reason"], "Starting");
  EXPECT_EQ(Cond(Find("SandboxFork", "Pending (no source yet)").object, "Reconciling")["reason"],
            "SourceNotFound");
}

// Status is recomputed on every pass and written only when it changed: a
// second pass over the object it produced, later, yields the same bytes.
TEST(HealthPhasesReasons, ASecondPassChangesNothing) {
  const kube::TimePoint later = *kube::ParseTime("2026-12-01T00:05:00Z");
  SandboxFacts f;
  f.node = "kvm-1";
  Json obj = Find("Sandbox", "Failed (VM died)").object;
  Json again = ComputeSandboxStatus(SandboxView::Parse(obj), f, later);
  EXPECT_EQ(again["conditions"], obj["status"]["conditions"]);
  WorkspaceFacts wf;
  wf.node = "kvm-1";
  wf.token_secret = "ws-workspace-token";
  wf.token_sha256 = "ab";
  obj = Find("Workspace", "Ready").object;
  EXPECT_EQ(ComputeWorkspaceStatus(WorkspaceView::Parse(obj), wf, later)["conditions"],
            obj["status"]["conditions"]);
}

// Stalled's lastTransitionTime moves when the Sandbox fails, not before.
TEST(HealthPhasesReasons, StalledTransitionsWhenTheVmDies) {
  const kube::TimePoint t1 = *kube::ParseTime("2026-12-01T00:00:10Z");
  const kube::TimePoint t2 = *kube::ParseTime("2026-12-01T00:01:00Z");
  SandboxFacts f;
  f.node = "kvm-1";
  Json obj = Find("Sandbox", "Running").object;
  obj["status"]["vm"] = {{"state", "Failed"}, {"message", "gone"}};
  obj["status"]["conditions"] =
      ComputeSandboxStatus(SandboxView::Parse(obj), f, t2)["conditions"];
  EXPECT_EQ(Cond(obj, "Stalled")["lastTransitionTime"], kube::FormatTime(t2));
  EXPECT_EQ(Cond(obj, "Reconciling")["lastTransitionTime"], kube::FormatTime(t1))
      << "False before and after";
}

}  // namespace
}  // namespace kubicle::op
