#include "kube/event_recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "kube/fake_kube_client.h"

namespace kubicle::kube {
namespace {

using namespace std::chrono_literals;

Json SandboxObject(const std::string& name = "s") {
  return {{"apiVersion", "kubicle.dev/v1alpha1"}, {"kind", "Sandbox"},
          {"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", "u-" + name}}}};
}

size_t EventCount(FakeKubeClient* c) { return (*c->List(EventResource(), "ns", {}))["items"].size(); }

// A FakeKubeClient whose creates wait until the test opens the gate: an
// apiserver that is slow to answer.
class GatedClient final : public KubeClient {
 public:
  Result<Json> Get(const Resource& r, std::string_view ns, std::string_view name,
                   std::string_view sub) override { return fake.Get(r, ns, name, sub); }
  Result<Json> List(const Resource& r, std::string_view ns, const ListOptions& o) override {
    return fake.List(r, ns, o);
  }
  Result<Json> Create(const Resource& r, std::string_view ns, const Json& object) override {
    ++creates_started;
    gate.wait();
    return fake.Create(r, ns, object);
  }
  Result<Json> Update(const Resource& r, std::string_view ns, const Json& o, std::string_view sub) override {
    return fake.Update(r, ns, o, sub);
  }
  Result<Json> Patch(const Resource& r, std::string_view ns, std::string_view name, PatchType t,
                     const Json& p, std::string_view sub, const PatchOptions& o) override {
    return fake.Patch(r, ns, name, t, p, sub, o);
  }
  Status Delete(const Resource& r, std::string_view ns, std::string_view name,
                const DeleteOptions& o) override { return fake.Delete(r, ns, name, o); }
  Status DeleteCollection(const Resource& r, std::string_view ns, std::string_view sel) override {
    return fake.DeleteCollection(r, ns, sel);
  }
  Status Watch(const Resource& r, std::string_view ns, const WatchOptions& o, const WatchHandler& h,
               const CancelToken& c) override { return fake.Watch(r, ns, o, h, c); }

  // Until the recorder's sender is blocked in a create (that Event is off
  // the queue).
  void WaitForACreateInFlight() const {
    while (creates_started == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  FakeKubeClient fake;
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  std::atomic<int> creates_started{0};
};

TEST(EventRecorderTest, RepeatsBumpTheCountOfOneEvent) {
  FakeClock clock;
  FakeKubeClient c(&clock);
  EventRecorder rec(&c, "kubicle-operator", "op-0", &clock);
  rec.Record(SandboxObject(), "Normal", "Scheduled", "placed on node a");
  ASSERT_TRUE(rec.Flush(5s));
  clock.Advance(std::chrono::seconds(3));
  rec.Record(SandboxObject(), "Normal", "Scheduled", "placed on node a");
  rec.Record(SandboxObject(), "Warning", "NameConflict", "other");
  ASSERT_TRUE(rec.Flush(5s));
  auto list = c.List(EventResource(), "ns", {});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 2u);
  const Json& first = (*list)["items"][0]["reason"] == "Scheduled" ? (*list)["items"][0]
                                                                    : (*list)["items"][1];
  EXPECT_EQ(first["count"], 2);
  EXPECT_EQ(first["involvedObject"]["uid"], "u-s");
  EXPECT_EQ(first["involvedObject"]["kind"], "Sandbox");
  EXPECT_EQ(first["source"]["component"], "kubicle-operator");
  EXPECT_NE(first["firstTimestamp"], first["lastTimestamp"]);
}

TEST(EventRecorderTest, FailuresAreSwallowed) {
  FakeKubeClient c;
  EventRecorder rec(&c, "kubicle-operator", "op-0");
  c.FailNext("create", Status::PermissionDenied("no"));
  rec.Record(Json{{"metadata", {{"name", "s"}, {"namespace", "ns"}}}}, "Normal", "X", "y");
  ASSERT_TRUE(rec.Flush(5s));
  EXPECT_EQ(EventCount(&c), 0u);
}

// The reconcile that records an Event never waits for the apiserver: Record
// returns while the create is still in flight, and the Event lands later.
TEST(EventRecorderTest, RecordDoesNotWaitForTheApiserver) {
  GatedClient c;
  EventRecorder rec(&c, "kubicle-operator", "op-0");
  rec.Record(SandboxObject(), "Normal", "Scheduled", "placed on node a");  // returns at once
  EXPECT_FALSE(rec.Flush(50ms));
  EXPECT_EQ(EventCount(&c.fake), 0u);
  c.open.set_value();
  ASSERT_TRUE(rec.Flush(5s));
  EXPECT_EQ(EventCount(&c.fake), 1u);
}

// A stalled apiserver cannot grow the queue without bound: beyond its
// length Events are dropped and counted.
TEST(EventRecorderTest, AFullQueueDropsEventsAndCountsThem) {
  GatedClient c;
  EventRecorderOptions o;
  o.max_pending = 3;
  o.burst = 0;  // the queue's own bound, without folding
  {
    EventRecorder rec(&c, "kubicle-operator", "op-0", &RealClock::Instance(), o);
    rec.Record(SandboxObject("first"), "Normal", "Scheduled", "a");
    c.WaitForACreateInFlight();
    for (int i = 0; i < 10; ++i) rec.Record(SandboxObject("s" + std::to_string(i)), "Normal", "Scheduled", "a");
    EXPECT_EQ(rec.dropped(), 7u);
    c.open.set_value();
    ASSERT_TRUE(rec.Flush(5s));
  }
  EXPECT_EQ(EventCount(&c.fake), 4u);
}

// Destruction waits for queued Events only for the drain timeout: an
// apiserver that never answers cannot hold up shutdown for ever.
TEST(EventRecorderTest, DestructionGivesUpOnAStalledApiserverAfterTheDrainTimeout) {
  GatedClient c;
  EventRecorderOptions o;
  o.drain_timeout = 100ms;
  auto start = std::chrono::steady_clock::now();
  std::thread opener;
  {
    EventRecorder rec(&c, "kubicle-operator", "op-0", &RealClock::Instance(), o);
    rec.Record(SandboxObject("a"), "Normal", "Scheduled", "x");
    rec.Record(SandboxObject("b"), "Normal", "Scheduled", "x");
    c.WaitForACreateInFlight();
    // The in-flight create finishes only after the drain timeout has passed.
    opener = std::thread([&] {
      std::this_thread::sleep_for(300ms);
      c.open.set_value();
    });
  }
  opener.join();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_EQ(EventCount(&c.fake), 1u) << "the queued second Event was dropped at shutdown";
}

std::vector<Json> Events(FakeKubeClient* c, const std::string& reason) {
  std::vector<Json> out;
  const Json list = *c->List(EventResource(), "ns", {});
  for (const Json& e : list["items"])
    if (e["reason"] == reason) out.push_back(e);
  return out;
}

const Json* Combined(const std::vector<Json>& events) {
  for (const Json& e : events)
    if (e["message"].get<std::string>().starts_with("(combined from similar events)")) return &e;
  return nullptr;
}

// A burst of similar Events (100 Sandboxes placed at once) costs `burst`
// creates and one combined Event, not one write each; other reasons keep
// their own budget.
TEST(EventRecorderTest, ABurstOfSimilarEventsIsFoldedIntoOneCombinedEvent) {
  FakeClock clock;
  FakeKubeClient c(&clock);
  EventRecorderOptions o;
  o.burst = 3;
  EventRecorder rec(&c, "kubicle-operator", "op-0", &clock, o);
  for (int i = 0; i < 10; ++i) rec.Record(SandboxObject("s" + std::to_string(i)), "Normal", "Scheduled", "placed on node a");
  rec.Record(SandboxObject("n"), "Warning", "NodeLost", "node a is gone");
  ASSERT_TRUE(rec.Flush(5s));
  const auto scheduled = Events(&c, "Scheduled");
  ASSERT_EQ(scheduled.size(), 4u);
  const Json* combined = Combined(scheduled);
  ASSERT_NE(combined, nullptr);
  EXPECT_EQ((*combined)["count"], 7);
  EXPECT_EQ((*combined)["message"],
            "(combined from similar events): 7 Scheduled Events in a burst, the last: placed on node a");
  EXPECT_EQ((*combined)["involvedObject"]["name"], "s9");
  for (const Json& e : scheduled)
    if (&e != combined) {
      EXPECT_EQ(e["count"], 1);
    }
  EXPECT_EQ(Events(&c, "NodeLost").size(), 1u);
}

// Tokens come back with the (injected) clock: a steady trickle is recorded
// one by one; the next burst adds to the same combined Event.
TEST(EventRecorderTest, TokensRefillWithTimeAndLaterBurstsAddToTheCombinedEvent) {
  FakeClock clock;
  FakeKubeClient c(&clock);
  EventRecorderOptions o;
  o.burst = 2;
  o.refill = 1000ms;
  EventRecorder rec(&c, "kubicle-operator", "op-0", &clock, o);
  rec.Record(SandboxObject("a"), "Normal", "Scheduled", "x");
  rec.Record(SandboxObject("b"), "Normal", "Scheduled", "x");
  rec.Record(SandboxObject("c"), "Normal", "Scheduled", "x");  // folded
  clock.Advance(std::chrono::seconds(1));
  rec.Record(SandboxObject("d"), "Normal", "Scheduled", "x");  // a token is back
  ASSERT_TRUE(rec.Flush(5s));
  auto scheduled = Events(&c, "Scheduled");
  ASSERT_EQ(scheduled.size(), 4u);
  ASSERT_NE(Combined(scheduled), nullptr);
  EXPECT_EQ((*Combined(scheduled))["count"], 1);
  for (int i = 0; i < 5; ++i) rec.Record(SandboxObject("e" + std::to_string(i)), "Normal", "Scheduled", "y");
  ASSERT_TRUE(rec.Flush(5s));
  scheduled = Events(&c, "Scheduled");
  ASSERT_EQ(scheduled.size(), 4u) << "the second burst is counted in the same combined Event";
  EXPECT_EQ((*Combined(scheduled))["count"], 6);
  EXPECT_EQ((*Combined(scheduled))["message"],
            "(combined from similar events): 5 Scheduled Events in a burst, the last: y");
}

// Folded Events are sent without a Flush once the refill interval has
// passed (in real time), so a burst's record reaches the apiserver.
TEST(EventRecorderTest, FoldedEventsAreSentAfterTheRefillIntervalWithoutAFlush) {
  FakeKubeClient c;
  EventRecorderOptions o;
  o.burst = 1;
  o.refill = 50ms;
  EventRecorder rec(&c, "kubicle-operator", "op-0", &RealClock::Instance(), o);
  for (int i = 0; i < 4; ++i) rec.Record(SandboxObject("s" + std::to_string(i)), "Normal", "Scheduled", "x");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!Combined(Events(&c, "Scheduled")) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  const auto scheduled = Events(&c, "Scheduled");
  ASSERT_NE(Combined(scheduled), nullptr) << "no combined Event within 10 s";
  int total = 0;  // every Event recorded is in one of them, none twice
  for (const Json& e : scheduled) total += e["count"].get<int>();
  EXPECT_EQ(total, 4);
}

}  // namespace
}  // namespace kubicle::kube
