#include "operator/token_secret.h"

#include <gtest/gtest.h>

#include "common/base64.h"
#include "common/sha256.h"
#include "kube/fake_kube_client.h"
#include "kube/json_fields.h"
#include "kube/resource.h"

namespace kubicle::op {
namespace {

constexpr char kNs[] = "team";
constexpr std::string_view kType = "kubicle.dev/workspace-token";
const kube::Duration kPendingRetry = std::chrono::seconds(5);

Json Owner(const std::string& uid) {
  return {{"apiVersion", "kubicle.dev/v1alpha1"},
          {"kind", "Workspace"},
          {"metadata",
           {{"name", "w"},
            {"namespace", kNs},
            {"uid", uid},
            {"labels", {{std::string(kLabelRun), "run-1"}, {"other", "x"}}}}}};
}

Result<TokenSecretResult> Ensure(kube::FakeKubeClient& client, const Json& owner,
                                 Outcome* out = nullptr) {
  Context ctx{};
  ctx.client = &client;
  ctx.config.unschedulable_retry = kPendingRetry;
  Outcome ignored;
  return EnsureTokenSecret(ctx, owner, ParseObjectMeta(owner), "Workspace", "w-token", kType,
                           out ? out : &ignored);
}

std::string StoredTokenHash(kube::FakeKubeClient& client) {
  auto secret = client.Get(kube::SecretResource(), kNs, "w-token");
  if (!secret.ok()) return "";
  auto token = Base64Decode(kube::StrAt(*secret, {"data", "token"}));
  if (!token.ok()) return "";
  return Sha256Hex(std::string(token->begin(), token->end()));
}

TEST(EnsureTokenSecretTest, CreatesTheOwnersSecretWithItsLabelsTypeAndOwnerReference) {
  kube::FakeKubeClient client;
  auto r = Ensure(client, Owner("uid-1"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->created);
  EXPECT_TRUE(r->check.problem.empty());
  auto secret = client.Get(kube::SecretResource(), kNs, "w-token");
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ((*secret)["type"], std::string(kType));
  EXPECT_TRUE(IsControlledBy(*secret, "uid-1"));
  EXPECT_EQ((*secret)["metadata"]["labels"],
            (Json{{std::string(kLabelRun), "run-1"}}))  // run and agent only, when set
      << (*secret)["metadata"].dump();
  EXPECT_EQ(r->sha256, StoredTokenHash(client));
}

TEST(EnsureTokenSecretTest, TheOwnersExistingSecretIsReadBackNotReplaced) {
  kube::FakeKubeClient client;
  auto first = Ensure(client, Owner("uid-1"));
  ASSERT_TRUE(first.ok());
  Outcome again_out;
  auto again = Ensure(client, Owner("uid-1"), &again_out);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->created);
  EXPECT_TRUE(again->check.problem.empty());
  EXPECT_FALSE(again_out.requeue_after.has_value()) << "nothing to wait for";
  EXPECT_EQ(again->sha256, first->sha256) << "the hash any node may already hold";
  EXPECT_EQ(StoredTokenHash(client), first->sha256);
}

TEST(EnsureTokenSecretTest, AnEarlierOwnersSecretIsWaitedForAndAForeignOneLeftAlone) {
  kube::FakeKubeClient client;
  ASSERT_TRUE(Ensure(client, Owner("uid-old")).ok());
  Outcome pending_out;
  auto pending = Ensure(client, Owner("uid-new"), &pending_out);
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(pending->check.reason, "TokenSecretPendingDeletion");
  EXPECT_TRUE(pending->sha256.empty());
  EXPECT_EQ(pending_out.requeue_after, kPendingRetry);

  ASSERT_TRUE(client.Delete(kube::SecretResource(), kNs, "w-token").ok());
  Json foreign = {
      {"metadata", {{"name", "w-token"}}}, {"type", "Opaque"}, {"stringData", {{"token", "mine"}}}};
  ASSERT_TRUE(client.Create(kube::SecretResource(), kNs, foreign).ok());
  Outcome conflict_out;
  auto conflict = Ensure(client, Owner("uid-new"), &conflict_out);
  ASSERT_TRUE(conflict.ok());
  EXPECT_EQ(conflict->check.reason, "TokenSecretConflict");
  EXPECT_EQ(conflict_out.requeue_after, std::chrono::seconds(60));
  EXPECT_EQ(StoredTokenHash(client), Sha256Hex(std::string("mine")));
}

TEST(EnsureTokenSecretTest, ASecretGoneBetweenCreateAndReadIsUnavailable) {
  kube::FakeKubeClient client;
  client.FailNext("create", Status::AlreadyExists("secrets \"w-token\" already exists"));
  auto r = Ensure(client, Owner("uid-1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "token Secret w-token vanished during the pass");
}

TEST(EnsureTokenSecretTest, ACreateFailureIsReturned) {
  kube::FakeKubeClient client;
  client.FailNext("create", Status::Unavailable("apiserver down"));
  auto r = Ensure(client, Owner("uid-1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "apiserver down");
}

}  // namespace
}  // namespace kubicle::op
