#include "vmm/kvm/vcpu_state.h"

#include <gtest/gtest.h>

#include "vmm/kvm/vm_state.h"

namespace kubicle::vmm::kvm {
namespace {

TEST(FixTscDeadlineTest, ZeroDeadlineTakesTheTscAndMovesLast) {
  std::vector<kvm_msr_entry> msrs = {
      {kMsrIa32TscDeadline, 0, 0}, {0x174, 0, 7}, {kMsrIa32Tsc, 0, 123456}, {0xc0000080, 0, 0x500}};
  FixTscDeadline(msrs);
  ASSERT_EQ(msrs.size(), 4u);
  EXPECT_EQ(msrs[0].index, 0x174u);
  EXPECT_EQ(msrs[1].index, kMsrIa32Tsc);
  EXPECT_EQ(msrs[2].index, 0xc0000080u);
  EXPECT_EQ(msrs[3].index, kMsrIa32TscDeadline);
  EXPECT_EQ(msrs[3].data, 123456u);
}

TEST(FixTscDeadlineTest, ArmedDeadlineIsKept) {
  std::vector<kvm_msr_entry> msrs = {{kMsrIa32TscDeadline, 0, 999}, {kMsrIa32Tsc, 0, 5}};
  FixTscDeadline(msrs);
  EXPECT_EQ(msrs[1].index, kMsrIa32TscDeadline);
  EXPECT_EQ(msrs[1].data, 999u);
}

TEST(AdvancedClockTest, AddsElapsedWallTimeButNeverGoesBack) {
  EXPECT_EQ(AdvancedClock(1000, 5000, 8000), 4000u);
  EXPECT_EQ(AdvancedClock(1000, 5000, 4000), 1000u);  // host clock went back
  EXPECT_EQ(AdvancedClock(1000, 0, 8000), 1000u);     // capture time unknown
}

}  // namespace
}  // namespace kubicle::vmm::kvm
