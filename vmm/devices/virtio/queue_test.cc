#include "vmm/devices/virtio/queue.h"

#include <gtest/gtest.h>

#include "vmm/devices/virtio/chain_io.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/test_driver.h"

namespace kubicle::vmm::devices::virtio {
namespace {

using testing::Buf;
using testing::DriverQueue;

constexpr uint64_t kMemSize = 2 << 20;
constexpr uint16_t kSize = 16;

class QueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = GuestMemory::CreateAnonymous({{0, kMemSize}});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mem_ = std::move(*m);
    dq_ = std::make_unique<DriverQueue>(*mem_, 0x1000, kSize);
    Configure(queue_, *dq_);
  }
  static void Configure(Queue& q, const DriverQueue& dq) {
    q.set_size(dq.size());
    q.set_desc_table(dq.desc());
    q.set_avail_ring(dq.avail());
    q.set_used_ring(dq.used());
    q.set_ready(true);
  }
  // Pops expecting a ring error; checks the queue is then broken.
  void ExpectBroken() {
    DescriptorChain c;
    auto r = queue_.Pop(*mem_, &c);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(queue_.broken());
    auto again = queue_.Pop(*mem_, &c);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  }

  std::unique_ptr<GuestMemory> mem_;
  std::unique_ptr<DriverQueue> dq_;
  Queue queue_{256};
};

TEST_F(QueueTest, PopsChainAndPublishesUsed) {
  ASSERT_TRUE(queue_.Validate(*mem_).ok());
  uint16_t head = dq_->AddChain({{0x10000, 16, false}, {0x11000, 100, false}, {0x12000, 64, true}});
  DescriptorChain c;
  auto r = queue_.Pop(*mem_, &c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(*r);
  EXPECT_EQ(c.head, head);
  ASSERT_EQ(c.descriptors.size(), 3u);
  EXPECT_EQ(c.descriptors[1].addr, 0x11000u);
  EXPECT_EQ(c.descriptors[1].len, 100u);
  EXPECT_FALSE(c.descriptors[1].device_writable);
  EXPECT_TRUE(c.descriptors[2].device_writable);
  EXPECT_EQ(c.descriptors[2].host, mem_->HostPointer(0x12000, 64));
  EXPECT_EQ(c.readable_len, 116u);
  EXPECT_EQ(c.writable_len, 64u);
  EXPECT_FALSE(*queue_.Pop(*mem_, &c));

  ASSERT_TRUE(queue_.AddUsed(*mem_, head, 5).ok());
  auto used = dq_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].id, head);
  EXPECT_EQ(used[0].len, 5u);
  EXPECT_EQ(queue_.state().next_avail, 1);
  EXPECT_EQ(queue_.state().next_used, 1);
}

TEST_F(QueueTest, UndoPopReturnsTheSameChainAgain) {
  uint16_t head = dq_->AddChain({{0x10000, 8, true}});
  auto a = queue_.Pop(*mem_);
  ASSERT_TRUE(a.ok() && a->has_value());
  queue_.UndoPop();
  auto b = queue_.Pop(*mem_);
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->head, head);
}

TEST_F(QueueTest, ValidateRejectsBadGeometry) {
  Queue q(256);
  Configure(q, *dq_);
  ASSERT_TRUE(q.Validate(*mem_).ok());
  q.set_size(12);
  EXPECT_FALSE(q.Validate(*mem_).ok());
  q.set_size(0);
  EXPECT_FALSE(q.Validate(*mem_).ok());
  Queue small(8);
  Configure(small, *dq_);  // size 16 > max 8
  EXPECT_FALSE(small.Validate(*mem_).ok());

  Configure(q, *dq_);
  q.set_desc_table(dq_->desc() + 8);
  EXPECT_FALSE(q.Validate(*mem_).ok());
  Configure(q, *dq_);
  q.set_used_ring(dq_->used() + 2);
  EXPECT_FALSE(q.Validate(*mem_).ok());
  Configure(q, *dq_);
  q.set_avail_ring(kMemSize - 8);  // ring runs past the end of RAM
  EXPECT_EQ(q.Validate(*mem_).code(), StatusCode::kOutOfRange);
  Configure(q, *dq_);
  q.set_desc_table(0xffff'ffff'ffff'fff0ull);
  EXPECT_EQ(q.Validate(*mem_).code(), StatusCode::kOutOfRange);
}

TEST_F(QueueTest, RejectsLoopingChain) {
  dq_->WriteDesc(0, 0x10000, 8, kDescFlagNext, 1);
  dq_->WriteDesc(1, 0x10000, 8, kDescFlagNext, 0);
  dq_->PushAvail(0);
  ExpectBroken();
}

TEST_F(QueueTest, RejectsSelfLoop) {
  dq_->WriteDesc(3, 0x10000, 8, kDescFlagNext, 3);
  dq_->PushAvail(3);
  ExpectBroken();
}

TEST_F(QueueTest, RejectsNextOutsideTable) {
  dq_->WriteDesc(0, 0x10000, 8, kDescFlagNext, kSize);
  dq_->PushAvail(0);
  ExpectBroken();
}

TEST_F(QueueTest, RejectsHeadOutsideTable) {
  dq_->PushAvail(kSize + 3);
  ExpectBroken();
}

TEST_F(QueueTest, RejectsBufferOutsideGuestMemory) {
  dq_->WriteDesc(0, kMemSize - 4, 8, 0, 0);
  dq_->PushAvail(0);
  ExpectBroken();
}

TEST_F(QueueTest, RejectsAddressPlusLengthOverflow) {
  dq_->WriteDesc(0, 0xffff'ffff'ffff'fff0ull, 0x100, kDescFlagWrite, 0);
  dq_->PushAvail(0);
  ExpectBroken();
}

TEST_F(QueueTest, RejectsIndirectWhenNotNegotiated) {
  dq_->WriteDesc(0, 0x10000, 32, kDescFlagIndirect, 0);
  dq_->PushAvail(0);
  ExpectBroken();
}

TEST_F(QueueTest, RejectsReadableAfterWritable) {
  dq_->WriteDesc(0, 0x10000, 8, kDescFlagWrite | kDescFlagNext, 1);
  dq_->WriteDesc(1, 0x11000, 8, 0, 0);
  dq_->PushAvail(0);
  ExpectBroken();
}

// Found by fuzz/vmm/virtqueue_fuzzer: an empty writable descriptor used to
// let a readable one follow it, and the chain reader, which splits the chain
// at the first writable descriptor, then looped forever on the readable bytes
// it could not reach (and the writer wrote into the readable buffer).
TEST_F(QueueTest, RejectsReadableAfterEmptyWritable) {
  dq_->WriteDesc(0, 0x10000, 16, kDescFlagNext, 1);
  dq_->WriteDesc(1, 0x11000, 0, kDescFlagWrite | kDescFlagNext, 2);
  dq_->WriteDesc(2, 0x12000, 8, kDescFlagNext, 3);
  dq_->WriteDesc(3, 0x13000, 1, kDescFlagWrite, 0);
  dq_->PushAvail(0);
  ExpectBroken();
}

TEST_F(QueueTest, RejectsAvailIndexJump) {
  dq_->AddChain({{0x10000, 8, true}});
  dq_->SetAvailIdx(kSize + 1);
  ExpectBroken();
}

TEST_F(QueueTest, ResetClearsBrokenState) {
  dq_->PushAvail(kSize);
  ExpectBroken();
  queue_.Reset();
  EXPECT_FALSE(queue_.broken());
  EXPECT_EQ(queue_.state().size, 256);
  EXPECT_FALSE(queue_.ready());
}

TEST(QueueOverflowTest, RejectsTotalLengthAbove32Bits) {
  // 8193 descriptors of 512 KiB each add up to just over 4 GiB.
  constexpr uint16_t kBig = 16384;
  auto m = GuestMemory::CreateAnonymous({{0, 4 << 20}});
  ASSERT_TRUE(m.ok());
  GuestMemory& mem = **m;
  DriverQueue dq(mem, 0x100000, kBig);
  for (uint16_t i = 0; i <= 8192; ++i)
    dq.WriteDesc(i, 0, 512 << 10, i < 8192 ? kDescFlagNext : 0, static_cast<uint16_t>(i + 1));
  dq.PushAvail(0);
  Queue q(kBig);
  q.set_size(kBig);
  q.set_desc_table(dq.desc());
  q.set_avail_ring(dq.avail());
  q.set_used_ring(dq.used());
  q.set_ready(true);
  ASSERT_TRUE(q.Validate(mem).ok());
  DescriptorChain c;
  auto r = q.Pop(mem, &c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(q.broken());
}

TEST_F(QueueTest, IndicesWrapAround) {
  QueueState s = queue_.state();
  s.next_avail = s.next_used = 65533;
  queue_.Restore(s);
  dq_->StartAt(65533);
  std::vector<uint16_t> heads;
  for (int i = 0; i < 6; ++i) heads.push_back(dq_->AddChain({{0x10000u + 0x100u * i, 8, true}}));
  EXPECT_EQ(dq_->avail_idx(), 3);
  for (int i = 0; i < 6; ++i) {
    DescriptorChain c;
    auto r = queue_.Pop(*mem_, &c);
    ASSERT_TRUE(r.ok() && *r) << i;
    EXPECT_EQ(c.head, heads[i]);
    EXPECT_EQ(c.descriptors[0].addr, 0x10000u + 0x100u * i);
    ASSERT_TRUE(queue_.AddUsed(*mem_, c.head, i).ok());
  }
  EXPECT_EQ(queue_.state().next_avail, 3);
  EXPECT_EQ(dq_->used_idx(), 3);
  auto used = dq_->TakeUsed();
  ASSERT_EQ(used.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(used[i].len, static_cast<uint32_t>(i));
}

TEST_F(QueueTest, HonoursNoInterruptFlag) {
  uint16_t h = dq_->AddChain({{0x10000, 8, true}});
  ASSERT_TRUE(*queue_.Pop(*mem_) );
  ASSERT_TRUE(queue_.AddUsed(*mem_, h, 0).ok());
  dq_->SetAvailFlags(kAvailFlagNoInterrupt);
  EXPECT_FALSE(queue_.NeedsInterrupt(*mem_));
  dq_->SetAvailFlags(0);
  h = dq_->AddChain({{0x10000, 8, true}});
  ASSERT_TRUE(*queue_.Pop(*mem_));
  ASSERT_TRUE(queue_.AddUsed(*mem_, h, 0).ok());
  EXPECT_TRUE(queue_.NeedsInterrupt(*mem_));
  // Nothing new since the last interrupt.
  EXPECT_FALSE(queue_.NeedsInterrupt(*mem_));
}

TEST_F(QueueTest, EventIdxSuppressesUntilUsedEvent) {
  queue_.set_event_idx(true);
  auto use_one = [&] {
    uint16_t h = dq_->AddChain({{0x10000, 8, true}});
    DescriptorChain c;
    ASSERT_TRUE(*queue_.Pop(*mem_, &c));
    ASSERT_TRUE(queue_.AddUsed(*mem_, h, 0).ok());
    dq_->TakeUsed();
  };
  use_one();
  EXPECT_TRUE(queue_.NeedsInterrupt(*mem_));  // first one: nothing known yet
  dq_->SetUsedEvent(2);                       // "interrupt me once used idx passes 2"
  use_one();                                  // used idx 2
  EXPECT_FALSE(queue_.NeedsInterrupt(*mem_));
  use_one();  // used idx 3: crossed used_event
  EXPECT_TRUE(queue_.NeedsInterrupt(*mem_));
  dq_->SetUsedEvent(10);
  use_one();
  use_one();
  EXPECT_FALSE(queue_.NeedsInterrupt(*mem_));
}

TEST_F(QueueTest, EventIdxPublishesAvailEventWhenEmpty) {
  queue_.set_event_idx(true);
  dq_->AddChain({{0x10000, 8, true}});
  dq_->AddChain({{0x10000, 8, true}});
  DescriptorChain c;
  ASSERT_TRUE(*queue_.Pop(*mem_, &c));
  ASSERT_TRUE(*queue_.Pop(*mem_, &c));
  EXPECT_EQ(dq_->avail_event(), 0);  // not written while work was pending
  EXPECT_FALSE(*queue_.Pop(*mem_, &c));
  EXPECT_EQ(dq_->avail_event(), 2);  // the driver must kick for entry 2
}

TEST_F(QueueTest, ChainReaderAndWriterStayInBounds) {
  ASSERT_TRUE(mem_->Write(0x10000, "abcd", 4).ok());
  ASSERT_TRUE(mem_->Write(0x11000, "efghij", 6).ok());
  dq_->AddChain({{0x10000, 4, false}, {0x11000, 6, false}, {0x12000, 3, true}, {0x13000, 5, true}});
  auto c = queue_.Pop(*mem_);
  ASSERT_TRUE(c.ok() && c->has_value());
  ChainReader r(**c);
  char buf[16] = {};
  ASSERT_TRUE(r.Skip(2).ok());
  ASSERT_TRUE(r.Read(buf, 5).ok());
  EXPECT_EQ(std::string(buf, 5), "cdefg");
  EXPECT_EQ(r.remaining(), 3u);
  EXPECT_EQ(r.Read(buf, 4).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.remaining(), 3u);  // a failed read consumes nothing
  std::vector<iovec> iov;
  EXPECT_EQ(r.Iovecs(100, &iov), 3u);
  ASSERT_EQ(iov.size(), 1u);
  EXPECT_EQ(std::string(static_cast<char*>(iov[0].iov_base), iov[0].iov_len), "hij");

  ChainWriter w(**c);
  EXPECT_EQ(w.remaining(), 8u);
  ASSERT_TRUE(w.Write("0123456", 7).ok());
  EXPECT_EQ(w.consumed(), 7u);
  EXPECT_FALSE(w.Write("xy", 2).ok());
  char out[8] = {};
  ASSERT_TRUE(mem_->Read(0x12000, out, 3).ok());
  EXPECT_EQ(std::string(out, 3), "012");
  ASSERT_TRUE(mem_->Read(0x13000, out, 5).ok());
  EXPECT_EQ(std::string(out, 4), "3456");
  EXPECT_EQ(out[4], 0);  // nothing past what was written
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
