#include "operator/context.h"

#include <gtest/gtest.h>

#include "kube/fake_kube_client.h"
#include "kube/resource.h"

namespace kubicle::op {
namespace {

constexpr char kNs[] = "team";

class FinalizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_.client = &client_;
    Json obj = {{"apiVersion", "kubicle.dev/v1alpha1"},
                {"kind", "Workspace"},
                {"metadata", {{"name", "w"}, {"finalizers", Json::array({"someone.else/keep"})}}}};
    ASSERT_TRUE(client_.Create(kube::WorkspaceResource(), kNs, obj).ok());
  }
  ObjectMeta Meta() {
    auto got = client_.Get(kube::WorkspaceResource(), kNs, "w");
    EXPECT_TRUE(got.ok());
    return ParseObjectMeta(got.ok() ? *got : Json::object());
  }

  kube::FakeKubeClient client_;
  Context ctx_{};
};

TEST_F(FinalizerTest, AddedAfterOthersAndRemovedAloneOthersKept) {
  auto patched = AddFinalizer(ctx_, kube::WorkspaceResource(), Meta(), kWorkspaceFinalizer);
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ(ParseObjectMeta(*patched).finalizers,
            (std::vector<std::string>{"someone.else/keep", std::string(kWorkspaceFinalizer)}));
  EXPECT_EQ(Meta().finalizers, ParseObjectMeta(*patched).finalizers);

  ASSERT_TRUE(RemoveFinalizer(ctx_, kube::WorkspaceResource(), Meta(), kWorkspaceFinalizer).ok());
  EXPECT_EQ(Meta().finalizers, (std::vector<std::string>{"someone.else/keep"}));
}

TEST_F(FinalizerTest, RemovingFromAnObjectAlreadyGoneIsNoError) {
  // Gone between the read and the patch (the last other finalizer went).
  client_.FailNext("patch", Status::NotFound("workspaces \"w\" not found"));
  EXPECT_TRUE(RemoveFinalizer(ctx_, kube::WorkspaceResource(), Meta(), kWorkspaceFinalizer).ok());
}

TEST_F(FinalizerTest, OtherErrorsAreReturned) {
  client_.FailNext("patch", Status::Unavailable("apiserver down"));
  Status s = RemoveFinalizer(ctx_, kube::WorkspaceResource(), Meta(), kWorkspaceFinalizer);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kubicle::op
