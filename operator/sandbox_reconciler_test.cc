#include "operator/sandbox_reconciler.h"

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "operator/test_world.h"

namespace kubicle::op {
namespace {

using testing::kNs;
using testing::NewSandbox;

class SandboxReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    w.AddTemplate("py");
    w.Heartbeat("node-a", 10);
    w.TemplateReady("py", "node-a");
  }
  Result<Outcome> Reconcile(const std::string& name) {
    SandboxReconciler r(w.ctx);
    return r.Reconcile(kube::ObjectKey(kNs, name));
  }
  testing::World w;
};

TEST_F(SandboxReconcilerTest, SchedulesLabelsTokensAndStatus) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs,
                              NewSandbox("s1", "py", {{"kubicle.dev/run", "r1"}})).ok());
  auto out = Reconcile("s1");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  Json s = w.Sandbox("s1");
  EXPECT_TRUE(HasFinalizer(s, kFinalizer));
  EXPECT_EQ(Label(s, kLabelNode), "node-a");
  EXPECT_EQ(Label(s, kLabelTemplate), "py");
  EXPECT_EQ(s["status"]["nodeName"], "node-a");
  EXPECT_EQ(s["status"]["phase"], "Scheduled");
  EXPECT_EQ(s["status"]["tokenSecretName"], "s1-token");
  EXPECT_EQ(s["status"]["tokenSha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(FindCondition(s, "Scheduled")->value("status", ""), "True");
  EXPECT_EQ(FindCondition(s, "Ready")->value("reason", ""), "Scheduled");
  auto secret = w.client.Get(kube::SecretResource(), kNs, "s1-token");
  ASSERT_TRUE(secret.ok());
  EXPECT_TRUE(IsControlledBy(*secret, Uid(s)));
  EXPECT_EQ(Label(*secret, kLabelRun), "r1");
  // Default TTL 1 h: requeued for expiry.
  ASSERT_TRUE(out->requeue_after.has_value());
  EXPECT_EQ(*out->requeue_after, std::chrono::hours(1));
}

// spec.tokenSha256: the client brings its own token (the SDK sends only
// the hash), so no Secret is made and the node gets the client's hash; one
// that is not 64 lowercase hex (past an older CRD) fails the Sandbox.
TEST_F(SandboxReconcilerTest, AClientsOwnTokenHashNeedsNoSecret) {
  Json mine = NewSandbox("s1", "py");
  mine["spec"]["tokenSha256"] = Sha256Hex("the client's token");
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, mine).ok());
  Json bad = NewSandbox("s2", "py");
  bad["spec"]["tokenSha256"] = std::string(64, 'A');
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, bad).ok());
  ASSERT_TRUE(Reconcile("s1").ok());
  ASSERT_TRUE(Reconcile("s2").ok());
  const Json s1 = w.Sandbox("s1");
  EXPECT_EQ(s1["status"]["phase"], "Scheduled");
  EXPECT_EQ(s1["status"]["tokenSha256"], Sha256Hex("the client's token"));
  EXPECT_FALSE(s1["status"].contains("tokenSecretName"));
  const Json s2 = w.Sandbox("s2");
  EXPECT_EQ(s2["status"]["phase"], "Failed");
  EXPECT_EQ(FindCondition(s2, "Ready")->value("reason", ""), "TokenHashInvalid");
  EXPECT_FALSE(s2["status"].contains("tokenSha256"));
  EXPECT_TRUE(w.client.List(kube::SecretResource(), kNs, {})->at("items").empty());
}

TEST_F(SandboxReconcilerTest, SecondPassWritesNothing) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s1", "py")).ok());
  ASSERT_TRUE(Reconcile("s1").ok());
  w.client.ClearActions();
  w.clock.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(Reconcile("s1").ok());
  EXPECT_TRUE(w.client.Actions().empty()) << w.client.Actions()[0];
}

TEST_F(SandboxReconcilerTest, NodeReportsDriveReadyCondition) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s1", "py")).ok());
  ASSERT_TRUE(Reconcile("s1").ok());
  w.ReportVm("s1", "Running");
  ASSERT_TRUE(Reconcile("s1").ok());
  Json s = w.Sandbox("s1");
  EXPECT_EQ(s["status"]["phase"], "Running");
  EXPECT_EQ(FindCondition(s, "Ready")->value("status", ""), "True");
  EXPECT_EQ(s["status"]["vm"]["state"], "Running") << "the node's part is untouched";
}

TEST_F(SandboxReconcilerTest, UnschedulableReasons) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("nt", "missing")).ok());
  auto out = Reconcile("nt");
  ASSERT_TRUE(out.ok());
  Json s = w.Sandbox("nt");
  EXPECT_EQ(s["status"]["phase"], "Pending");
  EXPECT_EQ(FindCondition(s, "Scheduled")->value("reason", ""), "TemplateNotFound");
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(5));

  w.AddTemplate("cold");  // no node has baked it
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("c", "cold")).ok());
  ASSERT_TRUE(Reconcile("c").ok());
  EXPECT_EQ(FindCondition(w.Sandbox("c"), "Scheduled")->value("reason", ""), "NoReadyNode");
}

TEST_F(SandboxReconcilerTest, ASpecOfTheWrongShapeIsNotPlacedButSaysWhy) {
  Json s = NewSandbox("odd", "py");
  s["spec"]["resources"] = {{"memoryMiB", "lots"}};
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, s).ok());
  auto out = Reconcile("odd");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  Json got = w.Sandbox("odd");
  EXPECT_EQ(Label(got, kLabelNode), "");
  EXPECT_EQ(got["status"]["phase"], "Pending");
  auto sched = FindCondition(got, "Scheduled");
  EXPECT_EQ(sched->value("reason", ""), "InvalidSpec");
  EXPECT_EQ(sched->value("message", ""),
            "spec.resources.memoryMiB: expected an integer, got string");
  EXPECT_TRUE(HasFinalizer(got, kFinalizer));
  EXPECT_EQ(got["status"]["expiresAt"], kube::FormatTime(w.clock.Now() + std::chrono::hours(1)))
      << "it still expires";

  // A fork child whose source cannot be read is not placed as a plain Sandbox.
  Json child = NewSandbox("child", "py");
  child["spec"]["forkSource"] = 7;
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, child).ok());
  ASSERT_TRUE(Reconcile("child").ok());
  EXPECT_EQ(Label(w.Sandbox("child"), kLabelNode), "");
  EXPECT_EQ(FindCondition(w.Sandbox("child"), "Scheduled")->value("reason", ""), "InvalidSpec");
}

TEST_F(SandboxReconcilerTest, HostileNeighboursAndReportsDoNotStopAPass) {
  // Placed objects of every wrong shape in the cache, counted by the load
  // computation of every placement.
  for (const char* text : {
           R"({"metadata": {"name": "h1", "labels": {"kubicle.dev/node": "node-a"}}, "spec": 5})",
           R"({"metadata": {"name": "h2", "labels": {"kubicle.dev/node": "node-a"}},
               "spec": {"templateRef": ["py"], "resources": {"memoryMiB": -3}}})",
           R"({"metadata": {"name": "h3", "labels": {"kubicle.dev/node": "node-a"}},
               "spec": {"templateRef": {"name": 1}, "resources": "big"}})"}) {
    ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, Json::parse(text)).ok()) << text;
  }
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("ok", "py")).ok());
  ASSERT_TRUE(Reconcile("ok").ok());
  EXPECT_EQ(Label(w.Sandbox("ok"), kLabelNode), "node-a");
  // A node daemon's garbled report is no report; the operator's own
  // garbled conditions are rewritten.
  ASSERT_TRUE(w.client.Patch(kube::SandboxResource(), kNs, "ok", kube::PatchType::kMerge,
                             Json{{"status", {{"vm", "Running"}, {"conditions", "x"}}}}, "status")
                  .ok());
  ASSERT_TRUE(Reconcile("ok").ok());
  Json got = w.Sandbox("ok");
  EXPECT_EQ(got["status"]["phase"], "Scheduled");
  EXPECT_EQ(got["status"]["conditions"].size(), 5u) << "Scheduled, Ready, Expired, Reconciling, Stalled";
  for (const char* h : {"h1", "h2", "h3"}) EXPECT_TRUE(Reconcile(h).ok()) << h;
}

TEST_F(SandboxReconcilerTest, CapacityIsRespectedAcrossBackToBackDecisions) {
  w.Heartbeat("node-a", 2);
  for (const char* n : {"a", "b", "c"}) {
    ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox(n, "py")).ok());
    ASSERT_TRUE(Reconcile(n).ok());
  }
  EXPECT_EQ(Label(w.Sandbox("a"), kLabelNode), "node-a");
  EXPECT_EQ(Label(w.Sandbox("b"), kLabelNode), "node-a");
  EXPECT_EQ(Label(w.Sandbox("c"), kLabelNode), "");
  EXPECT_EQ(FindCondition(w.Sandbox("c"), "Scheduled")->value("reason", ""), "InsufficientCapacity");
}

TEST_F(SandboxReconcilerTest, DeadNodeIsNotChosen) {
  w.clock.Advance(std::chrono::seconds(41));  // node-a's lease ran out
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s", "py")).ok());
  ASSERT_TRUE(Reconcile("s").ok());
  EXPECT_EQ(Label(w.Sandbox("s"), kLabelNode), "");
}

TEST_F(SandboxReconcilerTest, ExpiryDeletesAndTeardownRemovesFinalizer) {
  Json s = NewSandbox("e", "py");
  s["spec"]["ttlSeconds"] = 30;
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, s).ok());
  auto out = Reconcile("e");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(30));
  EXPECT_EQ(w.Sandbox("e")["status"]["expiresAt"], kube::FormatTime(w.clock.Now() + std::chrono::seconds(30)));
  w.clock.Advance(std::chrono::seconds(30));
  w.Heartbeat("node-a", 10);
  ASSERT_TRUE(Reconcile("e").ok());
  Json gone = w.Sandbox("e");
  EXPECT_TRUE(IsDeleting(gone));
  EXPECT_EQ(FindCondition(gone, "Expired")->value("status", ""), "True");
  ASSERT_TRUE(Reconcile("e").ok());
  EXPECT_TRUE(HasFinalizer(w.Sandbox("e"), kFinalizer)) << "the node has not torn the VM down";
  EXPECT_EQ(w.Sandbox("e")["status"]["phase"], "Terminating");
  w.ReportVm("e", "Terminated");
  ASSERT_TRUE(Reconcile("e").ok());
  EXPECT_TRUE(kube::IsNotFound(w.client.Get(kube::SandboxResource(), kNs, "e").status()));
  EXPECT_TRUE(kube::IsNotFound(w.client.Get(kube::SecretResource(), kNs, "e-token").status()))
      << "the token Secret is garbage-collected with its owner";
}

TEST_F(SandboxReconcilerTest, FinalizerReleasedAfterGraceWhenNodeIsGone) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("g", "py")).ok());
  ASSERT_TRUE(Reconcile("g").ok());
  ASSERT_TRUE(w.client.Delete(kube::SandboxResource(), kNs, "g").ok());
  w.clock.Advance(std::chrono::seconds(60));  // lease expired 20 s ago
  auto out = Reconcile("g");
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(w.client.Get(kube::SandboxResource(), kNs, "g").ok());
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(100));
  w.clock.Advance(std::chrono::seconds(100));
  ASSERT_TRUE(Reconcile("g").ok());
  EXPECT_TRUE(kube::IsNotFound(w.client.Get(kube::SandboxResource(), kNs, "g").status()));
}

TEST_F(SandboxReconcilerTest, ASandboxOfANodeGoneBeyondTheGraceFails) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("n", "py")).ok());
  ASSERT_TRUE(Reconcile("n").ok());
  w.ReportVm("n", "Running");
  ASSERT_TRUE(Reconcile("n").ok());
  EXPECT_EQ(w.Sandbox("n")["status"]["phase"], "Running");
  w.clock.Advance(std::chrono::seconds(60));  // the lease expired 20 s ago: within the grace
  auto out = Reconcile("n");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(w.Sandbox("n")["status"]["phase"], "Running");
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(100));
  w.clock.Advance(std::chrono::seconds(100));
  ASSERT_TRUE(Reconcile("n").ok());
  Json lost = w.Sandbox("n");
  EXPECT_EQ(lost["status"]["phase"], "Failed");
  auto ready = FindCondition(lost, "Ready");
  EXPECT_EQ(ready->value("reason", ""), "NodeLost");
  EXPECT_NE(ready->value("message", "").find("node-a"), std::string::npos);
  // New Sandboxes are not placed there.
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("m", "py")).ok());
  ASSERT_TRUE(Reconcile("m").ok());
  EXPECT_EQ(Label(w.Sandbox("m"), kLabelNode), "");
  // A node that returns and renews brings it back only through its own report.
  w.Heartbeat("node-a", 10);
  ASSERT_TRUE(Reconcile("n").ok());
  EXPECT_EQ(w.Sandbox("n")["status"]["phase"], "Running");
}

TEST_F(SandboxReconcilerTest, ConflictIsReportedForRetry) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s", "py")).ok());
  w.client.FailNext("patch", kube::StatusFromHttp(409, kube::Json{{"reason", "Conflict"}}));
  auto out = Reconcile("s");
  EXPECT_TRUE(kube::IsConflict(out.status()));
  ASSERT_TRUE(Reconcile("s").ok());  // the retry converges
  EXPECT_EQ(Label(w.Sandbox("s"), kLabelNode), "node-a");
}

// A lister that shows one Sandbox as an earlier read saw it (an informer
// cache behind the apiserver).
class StaleLister final : public ObjectLister {
 public:
  StaleLister(ObjectLister* real, Json stale) : real_(real), stale_(std::move(stale)) {}
  std::optional<Json> Get(const kube::Resource& r, const std::string& key) override {
    if (r.plural == "sandboxes" && key == kube::ObjectKey(kNs, "s")) return stale_;
    return real_->Get(r, key);
  }
  std::vector<Json> List(const kube::Resource& r) override { return real_->List(r); }

 private:
  ObjectLister* real_;
  Json stale_;
};

TEST_F(SandboxReconcilerTest, AStaleCacheDoesNotReplaceARecordedToken) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s", "py")).ok());
  Json before = w.Sandbox("s");  // placed by nobody yet, no token
  ASSERT_TRUE(Reconcile("s").ok());
  const std::string recorded = w.Sandbox("s")["status"]["tokenSha256"];
  ASSERT_FALSE(recorded.empty());
  // A second pass from a cache that still shows the Sandbox without the
  // hash: the Secret exists; the hash nodes may already hold stays.
  Json stale = w.Sandbox("s");
  stale["status"].erase("tokenSha256");
  StaleLister lister(&w.lister, stale);
  Context ctx = w.ctx;
  ctx.lister = &lister;
  SandboxReconciler r(ctx);
  ASSERT_TRUE(r.Reconcile(kube::ObjectKey(kNs, "s")).ok());
  EXPECT_EQ(w.Sandbox("s")["status"]["tokenSha256"], recorded);
  (void)before;
}

// Serves the real objects, or for Sandbox "s" a copy the test sets (an
// informer cache that has not seen the operator's own last write).
class SettableLister final : public ObjectLister {
 public:
  explicit SettableLister(ObjectLister* real) : real_(real) {}
  std::optional<Json> Get(const kube::Resource& r, const std::string& key) override {
    if (stale && r.plural == "sandboxes" && key == kube::ObjectKey(kNs, "s")) return stale;
    return real_->Get(r, key);
  }
  std::vector<Json> List(const kube::Resource& r) override { return real_->List(r); }
  std::optional<Json> stale;

 private:
  ObjectLister* real_;
};

// The operator's reconciler (one, shared by its workers) reading a copy
// from before its own status write creates no second Secret and repeats no
// status write (each would be a request refused 409); news in the copy (the
// node's report) is still written.
TEST_F(SandboxReconcilerTest, ACopyBehindItsOwnWriteCostsNoWrite) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s", "py")).ok());
  SettableLister lister(&w.lister);
  Context ctx = w.ctx;
  ctx.lister = &lister;
  SandboxReconciler r(ctx);
  const std::string key = kube::ObjectKey(kNs, "s");
  ASSERT_TRUE(r.Reconcile(key).ok());
  const Json written = w.Sandbox("s");
  ASSERT_EQ(written["status"]["phase"], "Scheduled");
  Json behind = written;  // placed and finalized, but without the status write
  behind.erase("status");
  lister.stale = behind;
  w.client.ClearActions();
  ASSERT_TRUE(r.Reconcile(key).ok());
  EXPECT_TRUE(w.client.Actions().empty()) << w.client.Actions()[0];
  EXPECT_EQ(w.Sandbox("s")["status"], written["status"]);

  // The node's report, seen on a copy that is still behind on the token.
  w.ReportVm("s", "Running");
  behind = w.Sandbox("s");
  behind["status"].erase("tokenSha256");
  lister.stale = behind;
  ASSERT_TRUE(r.Reconcile(key).ok());
  const Json ready = w.Sandbox("s");
  EXPECT_EQ(ready["status"]["phase"], "Running");
  EXPECT_EQ(ready["status"]["tokenSha256"], written["status"]["tokenSha256"]);
  EXPECT_EQ(FindCondition(ready, "Ready")->value("status", ""), "True");
  EXPECT_EQ(w.client.List(kube::SecretResource(), kNs, {})->at("items").size(), 1u);
}

TEST(RecentWrites, AnotherObjectOfTheSameNameGetsNothingOfTheOld) {
  RecentWrites r;
  r.Token("ns/s", "uid-1", "aa");
  r.Status("ns/s", "uid-1", Json{{"phase", "Scheduled"}});
  EXPECT_EQ(r.TokenOf("ns/s", "uid-1"), "aa");
  EXPECT_EQ(r.TokenOf("ns/s", "uid-2"), "");
  EXPECT_TRUE(r.Repeats("ns/s", "uid-1", Json::object(), Json{{"phase", "Scheduled"}}));
  EXPECT_FALSE(r.Repeats("ns/s", "uid-2", Json::object(), Json{{"phase", "Scheduled"}}));
  EXPECT_FALSE(r.Repeats("ns/s", "uid-1", Json::object(), Json{{"phase", "Running"}}));
  // Caught up: the cache shows it all, so nothing is remembered any more.
  r.CaughtUp("ns/s", "uid-1", Json{{"phase", "Scheduled"}, {"tokenSha256", "aa"}});
  EXPECT_EQ(r.TokenOf("ns/s", "uid-1"), "");
  EXPECT_FALSE(r.Repeats("ns/s", "uid-1", Json::object(), Json{{"phase", "Scheduled"}}));
}

// A token Secret as the apiserver stores it: data base64.
Json TokenSecret(const std::string& name, const std::string& token_b64, const Json& owner_refs) {
  Json s = {{"metadata", {{"name", name}}}, {"type", "kubicle.dev/sandbox-token"},
            {"data", {{"token", token_b64}}}};
  if (!owner_refs.is_null()) s["metadata"]["ownerReferences"] = owner_refs;
  return s;
}

TEST_F(SandboxReconcilerTest, AnOwnedSecretWhoseHashWasNeverRecordedIsReadBack) {
  // The operator died between creating the Secret and the status write.
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s", "py")).ok());
  Json sbx = w.Sandbox("s");
  // "token-one" in base64; its SHA-256 below.
  ASSERT_TRUE(w.client.Create(kube::SecretResource(), kNs,
                              TokenSecret("s-token", "dG9rZW4tb25l",
                                          Json::array({ControllerRef(sbx)}))).ok());
  w.client.ClearActions();
  ASSERT_TRUE(Reconcile("s").ok());
  Json s = w.Sandbox("s");
  EXPECT_EQ(s["status"]["tokenSha256"], "75c5c10f256c75b650c6ffc2e83c6588af02766efd2de28f4de34547006e8d1a");  // sha256("token-one")
  EXPECT_EQ(s["status"]["phase"], "Scheduled");
  for (const std::string& a : w.client.Actions()) {
    EXPECT_EQ(a.find("delete"), std::string::npos) << a;
  }
  auto secret = w.client.Get(kube::SecretResource(), kNs, "s-token");
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ((*secret)["data"]["token"], "dG9rZW4tb25l") << "the Secret is never replaced";
}

TEST_F(SandboxReconcilerTest, AForeignSecretFailsTheSandboxAndIsNeverTouched) {
  Json user = TokenSecret("s-token", "dXNlcg==", nullptr);
  user["type"] = "Opaque";
  ASSERT_TRUE(w.client.Create(kube::SecretResource(), kNs, user).ok());
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s", "py")).ok());
  auto out = Reconcile("s");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  Json s = w.Sandbox("s");
  EXPECT_EQ(s["status"]["phase"], "Failed");
  EXPECT_FALSE(s["status"].contains("tokenSha256")) << "no token a node could check";
  auto ready = FindCondition(s, "Ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->value("reason", ""), "TokenSecretConflict");
  EXPECT_NE(ready->value("message", "").find("s-token"), std::string::npos);
  ASSERT_TRUE(out->requeue_after.has_value()) << "looked at again in case the Secret goes";
  auto secret = w.client.Get(kube::SecretResource(), kNs, "s-token");
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ((*secret)["data"]["token"], "dXNlcg==");
  EXPECT_EQ((*secret)["type"], "Opaque");

  // The user removes it: the next pass makes the Sandbox's own.
  ASSERT_TRUE(w.client.Delete(kube::SecretResource(), kNs, "s-token").ok());
  ASSERT_TRUE(Reconcile("s").ok());
  s = w.Sandbox("s");
  EXPECT_EQ(s["status"]["phase"], "Scheduled");
  EXPECT_EQ(s["status"]["tokenSha256"].get<std::string>().size(), 64u);
  secret = w.client.Get(kube::SecretResource(), kNs, "s-token");
  ASSERT_TRUE(secret.ok());
  EXPECT_TRUE(IsControlledBy(*secret, Uid(s)));
}

TEST_F(SandboxReconcilerTest, ASecretOfAnEarlierSandboxOfTheSameNameIsWaitedFor) {
  Json ref = {{"apiVersion", "kubicle.dev/v1alpha1"}, {"kind", "Sandbox"}, {"name", "s"},
              {"uid", "uid-of-the-old-one"}, {"controller", true}};
  ASSERT_TRUE(w.client.Create(kube::SecretResource(), kNs,
                              TokenSecret("s-token", "b2xk", Json::array({ref}))).ok());
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s", "py")).ok());
  auto out = Reconcile("s");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(FindCondition(w.Sandbox("s"), "Ready")->value("reason", ""), "TokenSecretPendingDeletion");
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(5));
  EXPECT_TRUE(w.client.Get(kube::SecretResource(), kNs, "s-token").ok());
}

TEST_F(SandboxReconcilerTest, AnOwnedSecretWithoutATokenIsInvalid) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("s", "py")).ok());
  ASSERT_TRUE(w.client.Create(kube::SecretResource(), kNs,
                              TokenSecret("s-token", "not base64!",
                                          Json::array({ControllerRef(w.Sandbox("s"))}))).ok());
  ASSERT_TRUE(Reconcile("s").ok());
  EXPECT_EQ(FindCondition(w.Sandbox("s"), "Ready")->value("reason", ""), "TokenSecretInvalid");
}

TEST(CheckTokenSecret, DecodesPaddedBase64) {
  Json s = TokenSecret("x-token", "YWI=", Json::array({Json{{"uid", "u"}, {"controller", true}}}));
  EXPECT_EQ(CheckTokenSecret(s, "x", "u").token, "ab");
  s["data"]["token"] = "YQ==";
  EXPECT_EQ(CheckTokenSecret(s, "x", "u").token, "a");
  s["data"]["token"] = "YWJj";
  EXPECT_EQ(CheckTokenSecret(s, "x", "u").token, "abc");
  EXPECT_EQ(CheckTokenSecret(s, "x", "other").reason, "TokenSecretConflict");
}

// ---- A missing Lease counts as an expired one ------------------------------

TEST_F(SandboxReconcilerTest, ADeletedLeaseHoldsTheFinalizerForTheGrace) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("g", "py")).ok());
  ASSERT_TRUE(Reconcile("g").ok());
  w.ReportVm("g", "Running");
  ASSERT_TRUE(w.client.Delete(kube::SandboxResource(), kNs, "g").ok());
  ASSERT_TRUE(w.client.Delete(kube::LeaseResource(), testing::kLeaseNs, "kubicle-node-node-a").ok());
  auto out = Reconcile("g");
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(HasFinalizer(w.Sandbox("g"), kFinalizer)) << "a live VM may still run there";
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(120));
  w.clock.Advance(std::chrono::seconds(119));
  out = Reconcile("g");
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(HasFinalizer(w.Sandbox("g"), kFinalizer));
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(1));
  w.clock.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(Reconcile("g").ok());
  EXPECT_TRUE(kube::IsNotFound(w.client.Get(kube::SandboxResource(), kNs, "g").status()));
}

TEST_F(SandboxReconcilerTest, AMislabelledLeaseFailsTheSandboxOnlyAfterTheGrace) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("n", "py")).ok());
  ASSERT_TRUE(Reconcile("n").ok());
  w.ReportVm("n", "Running");
  ASSERT_TRUE(Reconcile("n").ok());
  // The Lease now names another node: node-a has none.
  ASSERT_TRUE(w.client.Patch(kube::LeaseResource(), testing::kLeaseNs, "kubicle-node-node-a",
                             kube::PatchType::kMerge,
                             Json{{"metadata", {{"labels", {{"kubicle.dev/node", "node-z"}}}}}}).ok());
  auto out = Reconcile("n");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(w.Sandbox("n")["status"]["phase"], "Running");
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(120));
  w.clock.Advance(std::chrono::seconds(120));
  ASSERT_TRUE(Reconcile("n").ok());
  Json lost = w.Sandbox("n");
  EXPECT_EQ(lost["status"]["phase"], "Failed");
  EXPECT_NE(FindCondition(lost, "Ready")->value("message", "").find("no heartbeat Lease"),
            std::string::npos);
}

TEST_F(SandboxReconcilerTest, ALeaseThatComesBackRestartsTheGrace) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("g", "py")).ok());
  ASSERT_TRUE(Reconcile("g").ok());
  ASSERT_TRUE(w.client.Delete(kube::SandboxResource(), kNs, "g").ok());
  ASSERT_TRUE(w.client.Delete(kube::LeaseResource(), testing::kLeaseNs, "kubicle-node-node-a").ok());
  ASSERT_TRUE(Reconcile("g").ok());
  w.clock.Advance(std::chrono::seconds(100));
  w.Heartbeat("node-a", 10);
  ASSERT_TRUE(Reconcile("g").ok());
  ASSERT_TRUE(w.client.Delete(kube::LeaseResource(), testing::kLeaseNs, "kubicle-node-node-a").ok());
  w.clock.Advance(std::chrono::seconds(30));
  auto out = Reconcile("g");
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(HasFinalizer(w.Sandbox("g"), kFinalizer)) << "missing again for 0 s, not 130 s";
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(120));
}

}  // namespace
}  // namespace kubicle::op
