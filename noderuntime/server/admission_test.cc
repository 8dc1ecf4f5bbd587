#include "noderuntime/server/admission.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kubicle::noderuntime::server {
namespace {

using C = Admission::Class;
using R = Admission::Refusal;

TEST(Admission, PerTenantCapLeavesOtherTenantsAndClassesAlone) {
  Admission a({.health = 2, .admin = 2, .tenants = 10, .per_tenant = 3});
  R why;
  std::vector<Admission::Ticket> held;
  for (int i = 0; i < 3; ++i) held.push_back(*a.TryAcquire(C::kTenant, "noisy", &why));
  EXPECT_FALSE(a.TryAcquire(C::kTenant, "noisy", &why));
  EXPECT_EQ(why, R::kTenantFull);
  EXPECT_EQ(a.in_flight_of("noisy"), 3u);
  auto quiet = a.TryAcquire(C::kTenant, "quiet", &why);
  EXPECT_TRUE(quiet);
  EXPECT_TRUE(a.TryAcquire(C::kAdmin, "", &why));
  EXPECT_TRUE(a.TryAcquire(C::kHealth, "", &why));
  held.pop_back();  // a slot back
  EXPECT_TRUE(a.TryAcquire(C::kTenant, "noisy", &why));
}

TEST(Admission, ClassCapsAreSeparate) {
  Admission a({.health = 1, .admin = 1, .tenants = 2, .per_tenant = 8});
  R why;
  auto t1 = a.TryAcquire(C::kTenant, "a", &why);
  auto t2 = a.TryAcquire(C::kTenant, "b", &why);
  EXPECT_FALSE(a.TryAcquire(C::kTenant, "c", &why));
  EXPECT_EQ(why, R::kClassFull);
  auto adm = a.TryAcquire(C::kAdmin, "", &why);
  ASSERT_TRUE(adm);
  EXPECT_FALSE(a.TryAcquire(C::kAdmin, "", &why));
  EXPECT_TRUE(a.TryAcquire(C::kHealth, "", &why));
  EXPECT_EQ(a.in_flight(C::kTenant), 2u);
  EXPECT_EQ(a.in_flight(), 3u);  // the health ticket above is gone already
}

TEST(Admission, TicketsMoveAndWaitIdle) {
  Admission a({});
  R why;
  auto t = a.TryAcquire(C::kTenant, "x", &why);
  Admission::Ticket moved = std::move(*t);
  t.reset();
  EXPECT_EQ(a.in_flight_of("x"), 1u);
  EXPECT_FALSE(a.WaitIdle(std::chrono::milliseconds(10)));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    moved.Release();
  });
  EXPECT_TRUE(a.WaitIdle(std::chrono::seconds(5)));
  release.join();
  EXPECT_EQ(a.in_flight(), 0u);
}

}  // namespace
}  // namespace kubicle::noderuntime::server
