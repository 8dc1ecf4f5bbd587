#include "operator/api.h"

#include <gtest/gtest.h>

namespace kubicle::op {
namespace {

TEST(ApiTest, BoundedNamesAreStableAndShort) {
  EXPECT_EQ(BoundedName("f", "-3"), "f-3");
  std::string longname(300, 'x');
  std::string a = BoundedName(longname, "-12");
  EXPECT_EQ(a.size(), 253u);
  EXPECT_TRUE(a.ends_with("-12"));
  EXPECT_EQ(a, BoundedName(longname, "-12"));
  EXPECT_NE(a, BoundedName(std::string(299, 'x') + "y", "-12"));
}

TEST(ApiTest, ControllerRefAndOwnership) {
  Json owner = {{"apiVersion", "kubicle.dev/v1alpha1"}, {"kind", "SandboxFork"},
                {"metadata", {{"name", "f"}, {"uid", "u1"}}}};
  Json child = {{"metadata", {{"ownerReferences", {ControllerRef(owner)}}}}};
  EXPECT_TRUE(IsControlledBy(child, "u1"));
  EXPECT_FALSE(IsControlledBy(child, "u2"));
  EXPECT_TRUE(child["metadata"]["ownerReferences"][0]["blockOwnerDeletion"].get<bool>());
}

TEST(ApiTest, HelpersReadHostileObjectsAsAbsent) {
  const Json odd = Json::parse(R"({
    "metadata": {"name": 1, "labels": ["a"], "finalizers": "kubicle.dev/vm-teardown",
                 "ownerReferences": [{"uid": "u1", "controller": "yes"}, 3]},
    "status": {"phase": 2, "conditions": {"type": "Ready"}}
  })");
  for (const Json& obj : {odd, Json(), Json::array(), Json("s"), Json::parse(R"({"metadata": 4})")}) {
    EXPECT_EQ(Name(obj), "");
    EXPECT_EQ(Label(obj, kLabelNode), "");
    EXPECT_TRUE(Labels(obj).empty());
    EXPECT_FALSE(HasFinalizer(obj, kFinalizer));
    EXPECT_FALSE(IsControlledBy(obj, "u1"));
    EXPECT_FALSE(IsDeleting(obj));
    EXPECT_EQ(StatusString(obj, "phase"), "");
    EXPECT_FALSE(FindCondition(obj, "Ready"));
    EXPECT_EQ(Generation(obj), 0);
  }
  const kube::TimePoint now{};
  Json conds = SetCondition(Json::parse(R"([1, "x", {"type": 5}, {"type": "Ready", "status": 1}])"),
                            {"Ready", "True", "Running", "up"}, 2, now);
  ASSERT_EQ(conds.size(), 2u) << conds.dump();
  EXPECT_EQ(conds[1]["status"], "True");
  EXPECT_EQ(SetCondition(Json("junk"), {"Ready", "True", "Running", "up"}, 2, now).size(), 1u);
}

}  // namespace
}  // namespace kubicle::op
