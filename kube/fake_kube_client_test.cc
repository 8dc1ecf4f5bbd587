#include "kube/fake_kube_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace kubicle::kube {
namespace {

Json Sbx(const std::string& name, std::map<std::string, std::string> labels = {}) {
  Json j = {{"metadata", {{"name", name}}}, {"spec", {{"templateRef", {{"name", "t"}}}}}};
  for (auto& [k, v] : labels) j["metadata"]["labels"][k] = v;
  return j;
}

TEST(FakeKubeClientTest, CreateGetConflictAndGeneration) {
  FakeKubeClient c;
  auto created = c.Create(SandboxResource(), "ns", Sbx("a"));
  ASSERT_TRUE(created.ok());
  EXPECT_EQ((*created)["metadata"]["generation"], 1);
  EXPECT_TRUE(IsAlreadyExists(c.Create(SandboxResource(), "ns", Sbx("a")).status()));

  Json stale = *created;
  Json upd = *created;
  upd["spec"]["ttlSeconds"] = 60;
  auto u = c.Update(SandboxResource(), "ns", upd);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)["metadata"]["generation"], 2);
  stale["spec"]["ttlSeconds"] = 5;
  EXPECT_TRUE(IsConflict(c.Update(SandboxResource(), "ns", stale).status()));
}

TEST(FakeKubeClientTest, StatusSubresourceIsSeparate) {
  FakeKubeClient c;
  Json obj = Sbx("a");
  obj["status"]["phase"] = "Running";
  auto created = c.Create(SandboxResource(), "ns", obj);
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE(created->contains("status")) << "status is ignored on create";
  Json s = *created;
  s["status"]["phase"] = "Pending";
  s["spec"]["ttlSeconds"] = 9;  // ignored by a status write
  auto w = c.Update(SandboxResource(), "ns", s, "status");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)["status"]["phase"], "Pending");
  EXPECT_FALSE((*w)["spec"].contains("ttlSeconds"));
  EXPECT_EQ((*w)["metadata"]["generation"], 1);
}

TEST(FakeKubeClientTest, FinalizerHoldsDeletionUntilRemoved) {
  FakeKubeClient c;
  Json obj = Sbx("a");
  obj["metadata"]["finalizers"] = {"kubicle.dev/vm-teardown"};
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", obj).ok());
  ASSERT_TRUE(c.Delete(SandboxResource(), "ns", "a").ok());
  auto got = c.Get(SandboxResource(), "ns", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE((*got)["metadata"].contains("deletionTimestamp"));
  auto p = c.Patch(SandboxResource(), "ns", "a", PatchType::kMerge,
                   Json{{"metadata", {{"finalizers", nullptr}}}});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(IsNotFound(c.Get(SandboxResource(), "ns", "a").status()));
}

TEST(FakeKubeClientTest, GarbageCollectsDependents) {
  FakeKubeClient c;
  auto owner = c.Create(SandboxForkResource(), "ns", Json{{"metadata", {{"name", "f"}}}});
  ASSERT_TRUE(owner.ok());
  Json child = Sbx("f-0");
  child["metadata"]["ownerReferences"] = {{{"uid", (*owner)["metadata"]["uid"]}, {"name", "f"}}};
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", child).ok());
  ASSERT_TRUE(c.Delete(SandboxForkResource(), "ns", "f").ok());
  EXPECT_TRUE(IsNotFound(c.Get(SandboxResource(), "ns", "f-0").status()));
}

TEST(FakeKubeClientTest, ListAndDeleteCollectionBySelector) {
  FakeKubeClient c;
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Sbx("a", {{"kubicle.dev/run", "r1"}})).ok());
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Sbx("b", {{"kubicle.dev/run", "r2"}})).ok());
  ASSERT_TRUE(c.Create(SandboxResource(), "other", Sbx("c", {{"kubicle.dev/run", "r1"}})).ok());
  ListOptions o;
  o.label_selector = "kubicle.dev/run=r1";
  EXPECT_EQ((*c.List(SandboxResource(), "", o))["items"].size(), 2u);
  EXPECT_EQ((*c.List(SandboxResource(), "ns", o))["items"].size(), 1u);
  ASSERT_TRUE(c.DeleteCollection(SandboxResource(), "ns", "kubicle.dev/run=r1").ok());
  EXPECT_EQ((*c.List(SandboxResource(), "", {}))["items"].size(), 2u);
}

TEST(FakeKubeClientTest, WatchResumesFromResourceVersionAndGoneAfterCompaction) {
  FakeKubeClient c;
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Sbx("a")).ok());
  std::string rv = std::to_string(c.CurrentResourceVersion());
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Sbx("b")).ok());
  ASSERT_TRUE(c.Delete(SandboxResource(), "ns", "a").ok());
  std::vector<std::string> seen;
  CancelToken cancel;
  WatchOptions o;
  o.resource_version = rv;
  Status s = c.Watch(SandboxResource(), "ns", o, [&](const WatchEvent& e) {
    seen.push_back(std::string(WatchEventTypeName(e.type)) + " " +
                   e.object["metadata"]["name"].get<std::string>());
    return seen.size() < 2;
  }, cancel);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED b", "DELETED a"}));
  c.CompactHistory();
  EXPECT_TRUE(IsGone(c.Watch(SandboxResource(), "ns", o, [](const WatchEvent&) { return true; },
                             cancel)));
}

TEST(FakeKubeClientTest, WatchSeesObjectsLeavingTheSelectorAsDeleted) {
  FakeKubeClient c;
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Sbx("a", {{"n", "1"}})).ok());
  WatchOptions o;
  o.label_selector = "n=1";
  o.resource_version = std::to_string(c.CurrentResourceVersion());
  ASSERT_TRUE(c.Patch(SandboxResource(), "ns", "a", PatchType::kMerge,
                      Json{{"metadata", {{"labels", {{"n", "2"}}}}}}).ok());
  WatchEventType got = WatchEventType::kError;
  CancelToken cancel;
  ASSERT_TRUE(c.Watch(SandboxResource(), "ns", o, [&](const WatchEvent& e) {
    got = e.type;
    return false;
  }, cancel).ok());
  EXPECT_EQ(got, WatchEventType::kDeleted);
}

TEST(FakeKubeClientTest, InjectedFaultsAndCloseWatches) {
  FakeKubeClient c;
  c.FailNext("create", Status::Unavailable("boom"));
  EXPECT_EQ(c.Create(SandboxResource(), "ns", Sbx("a")).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(c.Create(SandboxResource(), "ns", Sbx("a")).ok());
  CancelToken cancel;
  // A close before the watch began would be missed: close until it ends.
  std::atomic<bool> ended{false};
  std::thread closer([&] {
    while (!ended) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      c.CloseWatches();
    }
  });
  Status s = c.Watch(SandboxResource(), "ns", WatchOptions{}, [](const WatchEvent&) { return true; },
                     cancel);
  ended = true;
  closer.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
}

TEST(KubeClientTest, HttpStatusMapping) {
  EXPECT_TRUE(IsNotFound(StatusFromHttp(404, nullptr)));
  EXPECT_TRUE(IsAlreadyExists(StatusFromHttp(409, Json{{"reason", "AlreadyExists"}})));
  EXPECT_TRUE(IsConflict(StatusFromHttp(409, Json{{"reason", "Conflict"}})));
  EXPECT_TRUE(IsGone(StatusFromHttp(410, nullptr)));
  Status invalid = StatusFromHttp(422, Json{{"message", "spec.ttlSeconds: Invalid value"}});
  EXPECT_EQ(invalid.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid.message(), "spec.ttlSeconds: Invalid value");
  EXPECT_EQ(StatusFromHttp(503, nullptr).code(), StatusCode::kUnavailable);
  int calls = 0;
  Status r = RetryOnConflict(5, [&] {
    return ++calls < 3 ? StatusFromHttp(409, Json{{"reason", "Conflict"}}) : Status::Ok();
  });
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace kubicle::kube
