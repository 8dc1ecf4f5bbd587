#include "operator/scheduler.h"

#include <gtest/gtest.h>

namespace kubicle::op {
namespace {

std::map<std::string, NodeInfo> Nodes() {
  return {{"a", {"a", true, {}, 2, 0}}, {"b", {"b", true, {}, 2, 1024}}, {"dead", {"dead", false, {}, 99, 0}}};
}

TEST(PickNodeTest, SpreadsToLeastLoadedReadyLiveNode) {
  PlacementRequest req{{"a", "b", "dead"}, 256};
  EXPECT_EQ(*PickNode(req, Nodes(), {}), "a");  // tie -> name order
  EXPECT_EQ(*PickNode(req, Nodes(), {{"a", {1, 256}}}), "b");
}

TEST(PickNodeTest, RespectsCountAndMemoryAndReadiness) {
  PlacementRequest req{{"a", "b"}, 512};
  auto full = PickNode(req, Nodes(), {{"a", {2, 0}}, {"b", {0, 768}}});
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(PickNode({{"dead"}, 1}, Nodes(), {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(PickNode({{"ghost"}, 1}, Nodes(), {}).status().code(), StatusCode::kNotFound);
}

TEST(SchedulerTest, AssumedPlacementsCountUntilTheCacheShowsThem) {
  Scheduler s;
  PlacementRequest req{{"a"}, 0};
  EXPECT_EQ(*s.Place("ns/1", req, Nodes(), {}, {}), "a");
  EXPECT_EQ(*s.Place("ns/2", req, Nodes(), {}, {}), "a");
  EXPECT_FALSE(s.Place("ns/3", req, Nodes(), {}, {}).ok()) << "capacity 2 with two assumed";
  // The cache now shows ns/1 (load 1) and ns/2 is forgotten (deleted).
  s.Forget("ns/2");
  EXPECT_EQ(*s.Place("ns/3", req, Nodes(), {{"a", {1, 0}}}, {"ns/1"}), "a");
}

}  // namespace
}  // namespace kubicle::op
