// MemoryReservation (memory_reservation.h): a snapshot's memory file mapped
// over reserved addresses in place, and the reservation as plain memory.
// Unit tests: no KVM VM is made (RegisterWith is exercised by the kvm tests).
#include "vmm/memory_reservation.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"
#include "snapshot/memory_file.h"
#include "snapshot/testing/temp_dir.h"

namespace kubicle::vmm {
namespace {

using snapshot::MemoryRange;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = 1 << 20;

class MemoryReservationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = GuestMemory::CreateAnonymous({{0, 8 * kMiB}, {16 * kMiB, 4 * kMiB}});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mem_ = std::move(*m);
  }
  void Fill(uint64_t gpa, uint8_t value) {
    std::vector<uint8_t> page(kPage, value);
    ASSERT_TRUE(mem_->Write(gpa, page.data(), kPage).ok());
  }
  Result<snapshot::MemoryFileInfo> WriteTo(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644));
    if (!fd) return Status::FromErrno("create");
    std::vector<snapshot::MemoryRegion> view;
    for (const GuestRegion& r : mem_->regions()) view.push_back({r.guest_base, r.size, r.host});
    return snapshot::WriteMemoryFile(view, fd.get());
  }
  std::vector<MemoryRange> Ranges() const { return {{0, 8 * kMiB}, {16 * kMiB, 4 * kMiB}}; }

  snapshot::testing::TempDir dir_;
  std::unique_ptr<GuestMemory> mem_;
};

TEST_F(MemoryReservationTest, ReservationIsReplacedInPlaceByTheFile) {
  Fill(3 * kPage, 0x3c);
  ASSERT_TRUE(WriteTo(dir_ / "memory").ok());
  Result<MemoryReservation> res = MemoryReservation::Create(Ranges());
  ASSERT_TRUE(res.ok());
  ASSERT_EQ(::truncate((dir_ / "memory").c_str(), 4 * kMiB), 0);
  auto bad = res->MapFile(dir_ / "memory", Ranges());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  ASSERT_EQ(::truncate((dir_ / "memory").c_str(), 12 * kMiB), 0);
  auto other = res->MapFile(dir_ / "memory", {{0, 12 * kMiB}});
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  auto mem = res->MapFile(dir_ / "memory", Ranges());  // still usable after failures
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_EQ(*(*mem)->ReadObj<uint8_t>(3 * kPage), 0x3c);
  EXPECT_EQ((*mem)->regions()[1].guest_base, 16 * kMiB);
  EXPECT_EQ(res->MapFile(dir_ / "memory", Ranges()).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(MemoryReservationTest, ReservationCanBecomeAnonymousMemory) {
  Result<MemoryReservation> res = MemoryReservation::Create(Ranges());
  ASSERT_TRUE(res.ok());
  uint8_t* host = nullptr;
  auto mem = res->IntoAnonymous();
  ASSERT_TRUE(mem.ok());
  host = (*mem)->regions()[0].host;
  ASSERT_TRUE((*mem)->WriteObj<uint32_t>(0, 7).ok());
  EXPECT_EQ(*reinterpret_cast<uint32_t*>(host), 7u);
  EXPECT_EQ(res->IntoAnonymous().status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kubicle::vmm
