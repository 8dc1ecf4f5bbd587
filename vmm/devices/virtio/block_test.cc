#include "vmm/devices/virtio/block.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/mmio_transport.h"
#include "vmm/devices/virtio/test_driver.h"

namespace kubicle::vmm::devices::virtio {
namespace {

using testing::Buf;
using testing::CountingInterrupt;
using testing::DriverQueue;
using testing::MmioDriver;

constexpr uint64_t kDiskBytes = 64 * 512 + 100;  // a partial last sector is not exposed
constexpr GuestAddress kHdr = 0x10000, kData = 0x20000, kStatus = 0x30000;

struct Header {
  uint32_t type, reserved;
  uint64_t sector;
};

class BlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-blk-XXXXXX";
    int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    path_ = tmpl;
    image_.resize(kDiskBytes);
    for (size_t i = 0; i < image_.size(); ++i) image_[i] = static_cast<uint8_t>(i * 7 + i / 512);
    ASSERT_EQ(::write(fd, image_.data(), image_.size()), static_cast<ssize_t>(image_.size()));
    ::close(fd);
    auto m = GuestMemory::CreateAnonymous({{0, 1 << 20}});
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
  }
  void TearDown() override { ::unlink(path_.c_str()); }

  void Start(bool read_only, uint16_t queue_size = 64) {
    auto backend = RawFileBackend::Open(path_, read_only);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    irq_ = std::make_shared<CountingInterrupt>();
    auto t = MmioTransport::Create(std::make_unique<Block>(std::move(*backend), "kubicle-disk-0"),
                                   *mem_, irq_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    t_ = std::move(*t);
    drv_ = std::make_unique<MmioDriver>(*t_);
    q_ = std::make_unique<DriverQueue>(*mem_, 0x1000, queue_size);
    ASSERT_TRUE(drv_->Init(testing::kAllFeatures, {q_.get()}));
  }
  // Submits one request and returns {status byte, used length}.
  std::pair<uint8_t, uint32_t> Submit(uint32_t type, uint64_t sector, std::vector<Buf> data) {
    EXPECT_TRUE(mem_->WriteObj(kHdr, Header{type, 0, sector}).ok());
    EXPECT_TRUE(mem_->WriteObj<uint8_t>(kStatus, 0xee).ok());
    std::vector<Buf> chain{{kHdr, 16, false}};
    chain.insert(chain.end(), data.begin(), data.end());
    chain.push_back({kStatus, 1, true});
    q_->AddChain(chain);
    drv_->Notify(0);
    auto used = q_->TakeUsed();
    EXPECT_EQ(used.size(), 1u);
    return {*mem_->ReadObj<uint8_t>(kStatus), used.empty() ? 0 : used[0].len};
  }
  std::vector<uint8_t> FileBytes() {
    std::vector<uint8_t> b(kDiskBytes);
    int fd = ::open(path_.c_str(), O_RDONLY);
    EXPECT_EQ(::read(fd, b.data(), b.size()), static_cast<ssize_t>(b.size()));
    ::close(fd);
    return b;
  }
  std::vector<uint8_t> Guest(GuestAddress a, size_t n) {
    std::vector<uint8_t> b(n);
    EXPECT_TRUE(mem_->Read(a, b.data(), n).ok());
    return b;
  }

  std::string path_;
  std::vector<uint8_t> image_;
  std::unique_ptr<GuestMemory> mem_;
  std::shared_ptr<CountingInterrupt> irq_;
  std::unique_ptr<MmioTransport> t_;
  std::unique_ptr<MmioDriver> drv_;
  std::unique_ptr<DriverQueue> q_;
};

TEST_F(BlockTest, ConfigAndFeatures) {
  Start(false);
  uint64_t cap = 0;
  t_->Read(0x100, {reinterpret_cast<uint8_t*>(&cap), 8});
  EXPECT_EQ(cap, 64u);
  EXPECT_EQ(drv_->Read32(0x10c), Block::kSegMax);
  EXPECT_EQ(drv_->DeviceFeatures() & FeatureBit(5), 0u);  // not RO
  EXPECT_NE(drv_->DeviceFeatures() & FeatureBit(9), 0u);  // FLUSH
}

TEST_F(BlockTest, ReadsSectorsIntoScatteredBuffers) {
  Start(false);
  auto [status, len] = Submit(0, 3, {{kData, 512, true}, {kData + 0x1000, 1024, true}});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(len, 1537u);
  std::vector<uint8_t> want(image_.begin() + 3 * 512, image_.begin() + 4 * 512);
  EXPECT_EQ(Guest(kData, 512), want);
  want.assign(image_.begin() + 4 * 512, image_.begin() + 6 * 512);
  EXPECT_EQ(Guest(kData + 0x1000, 1024), want);
  EXPECT_EQ(irq_->count, 1);
}

TEST_F(BlockTest, WritesAndFlushes) {
  Start(false);
  std::vector<uint8_t> data(1024, 0x5a);
  ASSERT_TRUE(mem_->Write(kData, data.data(), data.size()).ok());
  auto [status, len] = Submit(1, 10, {{kData, 1024, false}});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(len, 1u);
  auto file = FileBytes();
  EXPECT_TRUE(std::equal(data.begin(), data.end(), file.begin() + 10 * 512));
  EXPECT_EQ(file[10 * 512 - 1], image_[10 * 512 - 1]);  // neighbours untouched
  EXPECT_EQ(file[12 * 512], image_[12 * 512]);
  EXPECT_EQ(Submit(4, 0, {}).first, 0);  // FLUSH
}

TEST_F(BlockTest, GetIdReturnsSerial) {
  Start(false);
  auto [status, len] = Submit(8, 0, {{kData, 20, true}});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(len, 21u);
  auto id = Guest(kData, 20);
  EXPECT_EQ(std::string(id.begin(), id.begin() + 14), "kubicle-disk-0");
  EXPECT_EQ(id[14], 0);
}

TEST_F(BlockTest, ReadOnlyDiskRefusesWrites) {
  Start(true);
  EXPECT_NE(drv_->DeviceFeatures() & FeatureBit(5), 0u);
  std::vector<uint8_t> data(512, 0x11);
  ASSERT_TRUE(mem_->Write(kData, data.data(), data.size()).ok());
  EXPECT_EQ(Submit(1, 0, {{kData, 512, false}}).first, 1);  // IOERR
  EXPECT_EQ(FileBytes(), image_);
  EXPECT_EQ(Submit(0, 0, {{kData, 512, true}}).first, 0);  // reads still work
  EXPECT_EQ(Submit(4, 0, {}).first, 0);
}

TEST_F(BlockTest, OutOfRangeRequestsFailWithoutTouchingAnything) {
  Start(false);
  std::vector<uint8_t> marker(1024, 0xcc);
  ASSERT_TRUE(mem_->Write(kData, marker.data(), marker.size()).ok());
  // Last sector plus one past the end.
  auto [status, len] = Submit(0, 63, {{kData, 1024, true}});
  EXPECT_EQ(status, 1);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(Guest(kData, 1024), marker);
  // Huge sectors must not wrap the byte offset.
  EXPECT_EQ(Submit(0, ~0ull / 512 + 2, {{kData, 512, true}}).first, 1);
  EXPECT_EQ(Submit(1, ~0ull, {{kData, 512, false}}).first, 1);
  EXPECT_EQ(Submit(1, 64, {{kData, 512, false}}).first, 1);
  EXPECT_EQ(FileBytes(), image_);
  // Exactly the last sector is fine.
  EXPECT_EQ(Submit(0, 63, {{kData, 512, true}}).first, 0);
}

TEST_F(BlockTest, MalformedRequests) {
  Start(false);
  // Data that is not a whole number of sectors.
  EXPECT_EQ(Submit(0, 0, {{kData, 100, true}}).first, 1);
  EXPECT_EQ(Submit(1, 0, {{kData, 700, false}}).first, 1);
  // Unknown type.
  EXPECT_EQ(Submit(77, 0, {}).first, 2);
  // GET_ID with a short buffer.
  EXPECT_EQ(Submit(8, 0, {{kData, 4, true}}).first, 1);
  // Header too short: 8 readable bytes.
  ASSERT_TRUE(mem_->WriteObj<uint8_t>(kStatus, 0xee).ok());
  q_->AddChain({{kHdr, 8, false}, {kStatus, 1, true}});
  drv_->Notify(0);
  auto used = q_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].len, 1u);
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(kStatus), 1);
  // No writable byte at all: returned with length 0, nothing written.
  q_->AddChain({{kHdr, 16, false}});
  drv_->Notify(0);
  used = q_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].len, 0u);
  EXPECT_EQ(FileBytes(), image_);
}

// The rule a driver relies on to free its buffers: every chain the device
// takes from the available ring comes back on the used ring exactly once,
// whatever the request did (read, write, error, unsupported, no status
// byte), however the chains are spread over notifies, and across a reset.
TEST_F(BlockTest, EveryChainTakenIsAnsweredExactlyOnce) {
  Start(false);
  ASSERT_TRUE(mem_->WriteObj(kHdr, Header{0, 0, 1}).ok());            // read
  ASSERT_TRUE(mem_->WriteObj(kHdr + 16, Header{1, 0, 2}).ok());       // write
  ASSERT_TRUE(mem_->WriteObj(kHdr + 32, Header{0, 0, 1000}).ok());    // out of range
  ASSERT_TRUE(mem_->WriteObj(kHdr + 48, Header{77, 0, 0}).ok());      // unsupported
  std::map<uint16_t, int> answered;
  auto take = [&] {
    for (const auto& e : q_->TakeUsed()) ++answered[static_cast<uint16_t>(e.id)];
  };
  std::vector<uint16_t> heads;
  for (int round = 0; round < 3; ++round) {
    heads.push_back(q_->AddChain({{kHdr, 16, false}, {kData, 512, true}, {kStatus, 1, true}}));
    heads.push_back(
        q_->AddChain({{kHdr + 16, 16, false}, {kData + 512, 512, false}, {kStatus + 1, 1, true}}));
    drv_->Notify(0);
    heads.push_back(
        q_->AddChain({{kHdr + 32, 16, false}, {kData + 1024, 512, true}, {kStatus + 2, 1, true}}));
    heads.push_back(q_->AddChain({{kHdr + 48, 16, false}, {kStatus + 3, 1, true}}));
    heads.push_back(q_->AddChain({{kHdr, 16, false}}));  // no status byte
    heads.push_back(q_->AddChain({{kHdr, 8, false}, {kStatus + 4, 1, true}}));  // short header
    drv_->Notify(0);
    drv_->Notify(0);  // a spurious kick finds nothing new
    take();
    for (uint16_t h : heads) EXPECT_EQ(answered[h], 1) << "head " << h << " round " << round;
    answered.clear();
    heads.clear();
  }
  EXPECT_EQ(q_->used_idx(), q_->avail_idx());

  // After a reset and a new probe, a new driver's chains are answered once
  // each (nothing owed to the old rings comes back).
  drv_->Write32(0x70, 0);
  std::vector<uint8_t> zeros(0x1000, 0);  // the new driver's rings start empty
  ASSERT_TRUE(mem_->Write(0x1000, zeros.data(), zeros.size()).ok());
  q_ = std::make_unique<DriverQueue>(*mem_, 0x1000, 64);
  ASSERT_TRUE(drv_->Init(testing::kAllFeatures, {q_.get()}));
  const uint16_t head = q_->AddChain({{kHdr, 16, false}, {kData, 512, true}, {kStatus, 1, true}});
  drv_->Notify(0);
  auto used = q_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].id, head);
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(kStatus), 0);
}

// The fuzzer's finding (fuzz/vmm/corpus/virtio_blk/regress-status-byte-over-avail-idx):
// a chain whose status byte lies on the high byte of avail->idx, in a ring
// of the device's full size. Writing IOERR (1) there moves the index from 1
// to 257, so the driver itself republishes its ring's entries, all head 0:
// the same chain 256 more times. The device answers each taking once, in
// order, within one drain's bound, and the queue stays usable; that the
// driver sees head 0 answered 257 times is the driver's doing.
TEST_F(BlockTest, ADriverThatRepublishesAHeadGetsOneAnswerPerTaking) {
  Start(true, Block::kQueueSize);  // read-only: the write fails with IOERR
  ASSERT_TRUE(mem_->WriteObj(kHdr, Header{1, 0, 0}).ok());
  const GuestAddress avail_idx_high = q_->avail() + 3;
  const uint16_t head =
      q_->AddChain({{kHdr, 16, false}, {kData, 512, false}, {avail_idx_high, 1, true}});
  ASSERT_EQ(q_->avail_idx(), 1);
  drv_->Notify(0);
  EXPECT_EQ(q_->avail_idx(), 257);
  EXPECT_EQ(q_->used_idx(), 257);
  auto used = q_->TakeUsed();
  ASSERT_EQ(used.size(), 257u);
  for (size_t i = 0; i < used.size(); ++i) {
    EXPECT_EQ(used[i].id, head) << i;
    EXPECT_EQ(used[i].len, 1u) << i;  // the status byte
  }
  EXPECT_EQ(drv_->Read32(0x70) & kStatusDeviceNeedsReset, 0u);
  EXPECT_EQ(FileBytes(), image_);
  // Still usable: the next request is answered once.
  ASSERT_TRUE(mem_->WriteObj(kHdr, Header{0, 0, 0}).ok());
  EXPECT_EQ(Submit(0, 0, {{kData, 512, true}}).first, 0);
}

// The same write in a ring smaller than the jump: 256 entries ahead of a
// 64-entry ring is a driver error the device refuses, breaking the queue
// (DEVICE_NEEDS_RESET) after answering the one chain it took.
TEST_F(BlockTest, AnAvailIndexJumpBeyondTheRingBreaksTheQueue) {
  Start(true);
  ASSERT_TRUE(mem_->WriteObj(kHdr, Header{1, 0, 0}).ok());
  const uint16_t head =
      q_->AddChain({{kHdr, 16, false}, {kData, 512, false}, {q_->avail() + 3, 1, true}});
  drv_->Notify(0);
  auto used = q_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].id, head);
  EXPECT_NE(drv_->Read32(0x70) & kStatusDeviceNeedsReset, 0u);
}

TEST(RawFileBackendTest, RejectsMissingFileAndDirectories) {
  EXPECT_FALSE(RawFileBackend::Open("/nonexistent/kubicle.img", true).ok());
  EXPECT_FALSE(RawFileBackend::Open("/tmp", true).ok());
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
