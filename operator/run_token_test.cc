// The run-token Secret of a SandboxTemplate through TemplateReconciler
// against the fake apiserver: made once and read back, its hash in status,
// a failed status write (conflict) publishing the same hash next pass, a
// deleted Secret made again with a new token, a foreign one left alone.
#include "operator/run_token.h"

#include <gtest/gtest.h>

#include "common/base64.h"
#include "common/sha256.h"
#include "kube/resource.h"
#include "operator/template_reconciler.h"
#include "operator/test_world.h"

namespace kubicle::op {
namespace {

using testing::kNs;

class RunTokenTest : public ::testing::Test {
 protected:
  void SetUp() override { w_.AddTemplate("py"); }
  Status Pass() { return TemplateReconciler(w_.ctx).Reconcile(kube::ObjectKey(kNs, "py")).status(); }
  Json Template() { return *w_.client.Get(kube::SandboxTemplateResource(), kNs, "py"); }
  Result<Json> Secret() { return w_.client.Get(kube::SecretResource(), kNs, "py-run"); }
  // The SHA-256 of the token the Secret holds.
  std::string SecretHash() {
    auto s = Secret();
    EXPECT_TRUE(s.ok());
    if (!s.ok()) return "";
    auto token = Base64Decode((*s)["data"]["token"].get<std::string>());
    EXPECT_TRUE(token.ok());
    return Sha256Hex(std::string(token->begin(), token->end()));
  }

  testing::World w_;
};

TEST_F(RunTokenTest, SecretIsMadeOnceAndItsHashPublished) {
  ASSERT_TRUE(Pass().ok());
  auto secret = Secret();
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ((*secret)["type"], "kubicle.dev/run-token");
  EXPECT_EQ((*secret)["metadata"]["labels"]["kubicle.dev/run-token"], "true");
  EXPECT_TRUE(IsControlledBy(*secret, Uid(Template())));
  EXPECT_EQ(RunTokenOwner(*secret), "py");
  const std::string hash = SecretHash();
  EXPECT_EQ(hash.size(), 64u);
  Json t = Template();
  EXPECT_EQ(t["status"]["runTokenSha256"], hash);
  EXPECT_EQ(t["status"]["runTokenSecretName"], "py-run");
  EXPECT_EQ(FindCondition(t, "RunToken")->value("status", ""), "True");
  // Later passes read it back: same Secret, same hash.
  const std::string rv = (*secret)["metadata"]["resourceVersion"];
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ((*Secret())["metadata"]["resourceVersion"], rv);
  EXPECT_EQ(Template()["status"]["runTokenSha256"], hash);
}

TEST_F(RunTokenTest, AStatusWriteConflictPublishesTheSameHashNextPass) {
  w_.client.FailNext("patch", kube::StatusFromHttp(409, kube::Json{{"reason", "Conflict"}}));
  Status st = Pass();
  EXPECT_TRUE(kube::IsConflict(st)) << st.ToString();
  EXPECT_FALSE(Template()["status"].contains("runTokenSha256"));
  ASSERT_TRUE(Secret().ok()) << "made before the status write";
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(Template()["status"]["runTokenSha256"], SecretHash()) << "not a second token";
}

TEST_F(RunTokenTest, ADeletedSecretIsMadeAgainWithANewToken) {
  ASSERT_TRUE(Pass().ok());
  const std::string old_hash = Template()["status"]["runTokenSha256"];
  ASSERT_TRUE(w_.client.Delete(kube::SecretResource(), kNs, "py-run").ok());
  ASSERT_TRUE(Pass().ok());
  const std::string new_hash = Template()["status"]["runTokenSha256"];
  EXPECT_EQ(new_hash, SecretHash());
  EXPECT_NE(new_hash, old_hash) << "the old token is revoked";
}

TEST_F(RunTokenTest, AForeignSecretIsLeftAloneAndNoHashPublished) {
  Json foreign = {{"metadata", {{"name", "py-run"}}}, {"stringData", {{"token", "theirs"}}}};
  ASSERT_TRUE(w_.client.Create(kube::SecretResource(), kNs, foreign).ok());
  const std::string rv = (*Secret())["metadata"]["resourceVersion"];
  ASSERT_TRUE(Pass().ok());
  Json t = Template();
  EXPECT_TRUE(t["status"]["runTokenSha256"].is_null() || !t["status"].contains("runTokenSha256"));
  auto c = FindCondition(t, "RunToken");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->value("status", ""), "False");
  EXPECT_EQ(c->value("reason", ""), "RunTokenSecretConflict");
  EXPECT_EQ((*Secret())["metadata"]["resourceVersion"], rv) << "never changed";
  // Once it is gone, the template gets its own.
  ASSERT_TRUE(w_.client.Delete(kube::SecretResource(), kNs, "py-run").ok());
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(Template()["status"]["runTokenSha256"], SecretHash());
  EXPECT_EQ(FindCondition(Template(), "RunToken")->value("status", ""), "True");
}

TEST_F(RunTokenTest, ASecretApiFailureDoesNotHoldBackReadiness) {
  w_.Heartbeat("a", 10);
  w_.TemplateReady("py", "a");
  w_.client.FailNext("create", Status::Unavailable("apiserver busy"));
  EXPECT_EQ(Pass().code(), StatusCode::kUnavailable);
  EXPECT_EQ(Template()["status"]["phase"], "Ready");
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(Template()["status"]["runTokenSha256"], SecretHash());
}

TEST(RunTokenOwnerTest, OnlyATemplateControllerReference) {
  Json s = {{"metadata", {{"ownerReferences", {{{"kind", "Sandbox"}, {"name", "x"}, {"controller", true}}}}}}};
  EXPECT_EQ(RunTokenOwner(s), "");
  s["metadata"]["ownerReferences"].push_back({{"kind", "SandboxTemplate"}, {"name", "py"}});
  EXPECT_EQ(RunTokenOwner(s), "") << "not the controller";
  s["metadata"]["ownerReferences"][1]["controller"] = true;
  EXPECT_EQ(RunTokenOwner(s), "py");
  EXPECT_EQ(RunTokenOwner(Json{{"metadata", {{"ownerReferences", "junk"}}}}), "");
  EXPECT_EQ(RunTokenSecretName(std::string(260, 'a')).size(), 253u);
}

}  // namespace
}  // namespace kubicle::op
