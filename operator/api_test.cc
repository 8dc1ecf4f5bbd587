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

}  // namespace
}  // namespace kubicle::op
