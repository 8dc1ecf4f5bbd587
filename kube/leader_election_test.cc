#include "kube/leader_election.h"

#include <gtest/gtest.h>

#include "kube/fake_kube_client.h"

namespace kubicle::kube {
namespace {

LeaderElectionConfig Cfg(const std::string& id) {
  return LeaderElectionConfig{"kubicle", "leader", id, std::chrono::seconds(15),
                              std::chrono::seconds(10), std::chrono::seconds(2)};
}

TEST(LeaderElectionTest, OneLeaderUntilTheLeaseExpiresOnTheCandidatesClock) {
  FakeClock clock;
  FakeKubeClient c(&clock);
  LeaderElector a(&c, Cfg("a"), &clock), b(&c, Cfg("b"), &clock);
  EXPECT_EQ(a.TryAcquireOrRenew().value(), true);
  EXPECT_EQ(b.TryAcquireOrRenew().value(), false);
  clock.Advance(std::chrono::seconds(10));
  EXPECT_EQ(a.TryAcquireOrRenew().value(), true);  // renew
  EXPECT_EQ(b.TryAcquireOrRenew().value(), false); // sees a new record
  clock.Advance(std::chrono::seconds(14));
  EXPECT_EQ(b.TryAcquireOrRenew().value(), false); // not yet 15 s since it changed
  clock.Advance(std::chrono::seconds(2));
  EXPECT_EQ(b.TryAcquireOrRenew().value(), true);  // a stopped renewing
  EXPECT_EQ(a.TryAcquireOrRenew().value(), false);
  auto lease = c.Get(LeaseResource(), "kubicle", "leader");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
}

TEST(LeaderElectionTest, ReleaseHandsOverImmediately) {
  FakeClock clock;
  FakeKubeClient c(&clock);
  LeaderElector a(&c, Cfg("a"), &clock), b(&c, Cfg("b"), &clock);
  ASSERT_TRUE(a.TryAcquireOrRenew().value());
  ASSERT_TRUE(a.Release().ok());
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(b.TryAcquireOrRenew().value(), true);
}

TEST(LeaderElectionTest, ConflictingWriteLoses) {
  FakeClock clock;
  FakeKubeClient c(&clock);
  LeaderElector a(&c, Cfg("a"), &clock);
  ASSERT_TRUE(a.TryAcquireOrRenew().value());
  c.FailNext("update", StatusFromHttp(409, Json{{"reason", "Conflict"}}));
  EXPECT_EQ(a.TryAcquireOrRenew().value(), false);
}

}  // namespace
}  // namespace kubicle::kube
