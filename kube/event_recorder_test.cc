#include "kube/event_recorder.h"

#include <gtest/gtest.h>

#include "kube/fake_kube_client.h"

namespace kubicle::kube {
namespace {

TEST(EventRecorderTest, RepeatsBumpTheCountOfOneEvent) {
  FakeClock clock;
  FakeKubeClient c(&clock);
  EventRecorder rec(&c, "kubicle-operator", "op-0", &clock);
  Json sbx = {{"apiVersion", "kubicle.dev/v1alpha1"}, {"kind", "Sandbox"},
              {"metadata", {{"name", "s"}, {"namespace", "ns"}, {"uid", "u1"}}}};
  rec.Record(sbx, "Normal", "Scheduled", "placed on node a");
  clock.Advance(std::chrono::seconds(3));
  rec.Record(sbx, "Normal", "Scheduled", "placed on node a");
  rec.Record(sbx, "Warning", "NameConflict", "other");
  auto list = c.List(EventResource(), "ns", {});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 2u);
  const Json& first = (*list)["items"][0]["reason"] == "Scheduled" ? (*list)["items"][0]
                                                                    : (*list)["items"][1];
  EXPECT_EQ(first["count"], 2);
  EXPECT_EQ(first["involvedObject"]["uid"], "u1");
  EXPECT_EQ(first["involvedObject"]["kind"], "Sandbox");
  EXPECT_EQ(first["source"]["component"], "kubicle-operator");
  EXPECT_NE(first["firstTimestamp"], first["lastTimestamp"]);
}

TEST(EventRecorderTest, FailuresAreSwallowed) {
  FakeKubeClient c;
  EventRecorder rec(&c, "kubicle-operator", "op-0");
  c.FailNext("create", Status::PermissionDenied("no"));
  rec.Record(Json{{"metadata", {{"name", "s"}, {"namespace", "ns"}}}}, "Normal", "X", "y");
  EXPECT_EQ((*c.List(EventResource(), "ns", {}))["items"].size(), 0u);
}

}  // namespace
}  // namespace kubicle::kube
