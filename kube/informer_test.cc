#include "kube/informer.h"

#include <gtest/gtest.h>

#include <thread>

#include "kube/fake_kube_client.h"

namespace kubicle::kube {
namespace {

using std::chrono::milliseconds;

bool Eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 300; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return cond();
}

Json Obj(const std::string& name) { return Json{{"metadata", {{"name", name}}}}; }

TEST(InformerTest, ListsThenFollowsWatch) {
  FakeKubeClient c;
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("a")).ok());
  Informer inf(&c, SandboxResource());
  std::atomic<int> deletes{0};
  inf.AddHandler([&](WatchEventType t, const Json&) {
    if (t == WatchEventType::kDeleted) ++deletes;
  });
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(2000)));
  EXPECT_TRUE(inf.Get("ns/a").has_value());
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("b")).ok());
  ASSERT_TRUE(c.Delete(SandboxResource(), "ns", "a").ok());
  EXPECT_TRUE(Eventually([&] { return inf.Get("ns/b").has_value() && !inf.Get("ns/a"); }));
  EXPECT_EQ(deletes.load(), 1);
  EXPECT_EQ(inf.Relists(), 1);
}

TEST(InformerTest, RecoversFromClosedWatchWithoutRelisting) {
  FakeKubeClient c;
  Informer inf(&c, SandboxResource());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(2000)));
  c.CloseWatches();  // apiserver restart
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("x")).ok());
  EXPECT_TRUE(Eventually([&] { return inf.Get("ns/x").has_value(); }));
  EXPECT_EQ(inf.Relists(), 1);
}

TEST(InformerTest, RelistsOnGoneAndReportsMissedDeletes) {
  FakeKubeClient c;
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("a")).ok());
  Informer inf(&c, SandboxResource());
  std::atomic<int> deletes{0};
  inf.AddHandler([&](WatchEventType t, const Json&) {
    if (t == WatchEventType::kDeleted) ++deletes;
  });
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(2000)));
  // The watch misses a delete and the history is compacted: the next watch
  // gets 410 Gone, the informer relists and notices "a" is gone.
  c.FailNext("watch", Status::Unavailable("down"), 1);
  c.CloseWatches();
  ASSERT_TRUE(c.Delete(SandboxResource(), "ns", "a").ok());
  c.CompactHistory();
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("z")).ok());
  EXPECT_TRUE(Eventually([&] { return inf.Get("ns/z").has_value() && !inf.Get("ns/a"); }));
  EXPECT_GE(inf.Relists(), 2);
  EXPECT_EQ(deletes.load(), 1);
}

}  // namespace
}  // namespace kubicle::kube
