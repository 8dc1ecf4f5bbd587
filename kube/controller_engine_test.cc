#include "kube/controller_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "kube/fake_kube_client.h"

namespace kubicle::kube {
namespace {

using std::chrono::milliseconds;

bool Eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return cond();
}

Json Obj(const std::string& name) { return Json{{"metadata", {{"name", name}}}}; }

// Passes seen per key, safe across workers.
struct Seen {
  std::mutex mu;
  std::map<std::string, int> passes;
  int Of(const std::string& key) {
    std::lock_guard l(mu);
    return passes[key];
  }
  void Add(const std::string& key) {
    std::lock_guard l(mu);
    ++passes[key];
  }
};

TEST(ControllerEngineTest, EveryEventRunsThePassOnItsKey) {
  FakeKubeClient c;
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("a")).ok());
  Informer inf(&c, SandboxResource());
  ControllerEngine engine({.workers = 2});
  inf.AddHandler([&](WatchEventType, const Json& o) { engine.Queue().Add(KeyOf(o)); });
  engine.Watch(&inf);
  Seen seen;
  ASSERT_TRUE(engine.Start([&](const std::string& key) { seen.Add(key); }, milliseconds(5000)).ok());
  EXPECT_TRUE(engine.Synced());
  EXPECT_TRUE(Eventually([&] { return seen.Of("ns/a") == 1; }));
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("b")).ok());
  EXPECT_TRUE(Eventually([&] { return seen.Of("ns/b") == 1; }));
  engine.Stop();
  // Nothing runs after Stop: a key added now is never passed.
  engine.Queue().Add("ns/late");
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(seen.Of("ns/late"), 0);
}

TEST(ControllerEngineTest, AKeyIsNeverRunByTwoWorkersAtOnce) {
  ControllerEngine engine({.workers = 4});
  std::atomic<int> running{0}, most{0}, passes{0};
  ASSERT_TRUE(engine
                  .Start([&](const std::string&) {
                    const int now = ++running;
                    most = std::max(most.load(), now);
                    std::this_thread::sleep_for(milliseconds(2));
                    --running;
                    ++passes;
                  })
                  .ok());
  for (int i = 0; i < 200; ++i) engine.Queue().Add("ns/one");
  EXPECT_TRUE(Eventually([&] { return engine.Queue().Len() == 0 && running == 0 && passes > 0; }));
  engine.Stop();
  EXPECT_EQ(most.load(), 1);
}

TEST(ControllerEngineTest, ResyncQueuesEveryObjectAgainThenRunsTheHook) {
  FakeKubeClient c;
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("a")).ok());
  ASSERT_TRUE(c.Create(SandboxResource(), "ns", Obj("b")).ok());
  Informer inf(&c, SandboxResource());
  ControllerEngine engine({.workers = 1, .resync = milliseconds(20)});
  engine.Watch(&inf, /*resync=*/true);  // no handler: only resyncs queue keys
  std::atomic<int> hooks{0};
  engine.OnResync([&] { ++hooks; });
  Seen seen;
  ASSERT_TRUE(engine.Start([&](const std::string& key) { seen.Add(key); }).ok());
  EXPECT_TRUE(Eventually([&] { return seen.Of("ns/a") >= 2 && seen.Of("ns/b") >= 2 && hooks >= 2; }));
  engine.Stop();
  const int after = hooks;
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(hooks.load(), after) << "no resync after Stop";
}

TEST(ControllerEngineTest, AnInformerThatCannotListFailsStartAndRunsNothing) {
  FakeKubeClient c;
  c.FailNext("list", Status::Unavailable("apiserver down"), 1000);
  Informer inf(&c, SandboxResource());
  ControllerEngine engine({.workers = 1});
  engine.Watch(&inf);
  std::atomic<int> passes{0};
  Status st = engine.Start([&](const std::string&) { ++passes; }, milliseconds(200));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  engine.Queue().Add("ns/a");
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(passes.load(), 0) << "no worker before the caches are there";
  engine.Stop();
}

TEST(ControllerEngineTest, QueueDepthIsAMetric) {
  metrics::Registry registry;
  ControllerEngine engine({.registry = &registry, .metrics_prefix = "kubicle_test"});
  engine.Queue().Add("ns/a");
  engine.Queue().Add("ns/b");
  const std::string text = registry.Render();
  EXPECT_NE(text.find("kubicle_test_queue_depth 2"), std::string::npos) << text;
}

}  // namespace
}  // namespace kubicle::kube
