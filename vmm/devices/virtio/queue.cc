#include "vmm/devices/virtio/queue.h"

#include <atomic>
#include <string>

#include "vmm/devices/virtio/layout.h"

namespace kubicle::vmm::devices::virtio {
namespace {

// Offsets inside the rings (spec 2.7.6 and 2.7.8).
constexpr uint64_t kRingHeader = 4;  // flags + idx
constexpr uint64_t AvailRingSize(uint16_t n) { return kRingHeader + 2ull * n + 2; }
constexpr uint64_t UsedRingSize(uint16_t n) { return kRingHeader + 8ull * n + 2; }

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Queue::Queue(uint16_t max_size) : max_size_(max_size) { Reset(); }

void Queue::Reset() {
  state_ = QueueState{};
  state_.size = max_size_;
  broken_ = false;
  broken_reason_.clear();
}

Status Queue::Validate(const GuestMemory& mem) const {
  const uint16_t n = state_.size;
  if (n == 0 || (n & (n - 1)) != 0 || n > max_size_)
    return Status::InvalidArgument("queue size " + std::to_string(n) +
                                   " is not a power of two in [1, " + std::to_string(max_size_) +
                                   "]");
  if (state_.desc_table % 16 || state_.avail_ring % 2 || state_.used_ring % 4)
    return Status::InvalidArgument("misaligned virtqueue ring");
  if (!mem.IsValidRange(state_.desc_table, sizeof(VirtqDesc) * uint64_t{n}))
    return Status::OutOfRange("descriptor table at " + Hex(state_.desc_table) +
                              " is outside guest memory");
  if (!mem.IsValidRange(state_.avail_ring, AvailRingSize(n)))
    return Status::OutOfRange("avail ring at " + Hex(state_.avail_ring) +
                              " is outside guest memory");
  if (!mem.IsValidRange(state_.used_ring, UsedRingSize(n)))
    return Status::OutOfRange("used ring at " + Hex(state_.used_ring) +
                              " is outside guest memory");
  return Status::Ok();
}

Result<uint16_t> Queue::AvailIdx(const GuestMemory& mem) const {
  return mem.LoadAcquire16(state_.avail_ring + 2);
}

Status Queue::PublishAvailEvent(const GuestMemory& mem) {
  GuestAddress avail_event = state_.used_ring + kRingHeader + 8ull * state_.size;
  RETURN_IF_ERROR(mem.StoreRelease16(avail_event, state_.next_avail));
  // The store must be visible before we look at avail->idx again, or a driver
  // that read the old avail_event could skip its kick while we go to sleep.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return Status::Ok();
}

Result<bool> Queue::Pop(const GuestMemory& mem, DescriptorChain* out) {
  if (broken_) return Status::FailedPrecondition("virtqueue is broken");
  if (!state_.ready) return Status::FailedPrecondition("virtqueue is not ready");
  auto idx = AvailIdx(mem);
  if (!idx.ok()) return Fail(idx.status());
  uint16_t pending = static_cast<uint16_t>(*idx - state_.next_avail);
  if (pending == 0 && state_.event_idx) {
    Status s = PublishAvailEvent(mem);
    if (!s.ok()) return Fail(s);
    idx = AvailIdx(mem);
    if (!idx.ok()) return Fail(idx.status());
    pending = static_cast<uint16_t>(*idx - state_.next_avail);
  }
  if (pending == 0) return false;
  if (pending > state_.size)
    return Fail(Status::InvalidArgument("avail idx " + std::to_string(*idx) + " is " +
                                        std::to_string(pending) + " entries ahead of " +
                                        std::to_string(state_.next_avail) + " (queue size " +
                                        std::to_string(state_.size) + ")"));
  uint16_t slot = state_.next_avail % state_.size;
  auto head = mem.ReadObj<uint16_t>(state_.avail_ring + kRingHeader + 2ull * slot);
  if (!head.ok()) return Fail(head.status());
  if (*head >= state_.size)
    return Fail(Status::InvalidArgument("chain head " + std::to_string(*head) +
                                        " is outside the descriptor table"));
  Status s = ReadChain(mem, *head, out);
  if (!s.ok()) return Fail(s);
  ++state_.next_avail;
  return true;
}

Result<std::optional<DescriptorChain>> Queue::Pop(const GuestMemory& mem) {
  DescriptorChain chain;
  ASSIGN_OR_RETURN(bool got, Pop(mem, &chain));
  if (!got) return std::optional<DescriptorChain>();
  return std::optional<DescriptorChain>(std::move(chain));
}

Status Queue::ReadChain(const GuestMemory& mem, uint16_t head, DescriptorChain* out) {
  out->head = head;
  out->descriptors.clear();
  uint64_t readable = 0;
  uint64_t writable = 0;
  // By descriptor, not by byte: an empty writable descriptor still ends the
  // readable part (ChainCursor splits the chain at the first writable one).
  bool seen_writable = false;
  uint16_t index = head;
  for (uint32_t count = 0;; ++count) {
    // A well-formed chain visits each descriptor at most once.
    if (count >= state_.size)
      return Status::InvalidArgument("descriptor chain from " + std::to_string(head) +
                                     " is longer than the queue (loop)");
    ASSIGN_OR_RETURN(VirtqDesc d, mem.ReadObj<VirtqDesc>(state_.desc_table +
                                                         sizeof(VirtqDesc) * uint64_t{index}));
    if (d.flags & kDescFlagIndirect)
      return Status::InvalidArgument("INDIRECT descriptor but the feature was not negotiated");
    const bool w = (d.flags & kDescFlagWrite) != 0;
    if (!w && seen_writable)
      return Status::InvalidArgument("device-readable descriptor after a writable one");
    seen_writable |= w;
    if (d.addr + d.len < d.addr)
      return Status::OutOfRange("descriptor address + length overflows");
    uint8_t* host = mem.HostPointer(d.addr, d.len);
    if (host == nullptr)
      return Status::OutOfRange("descriptor " + Hex(d.addr) + "+" + Hex(d.len) +
                                " is outside guest memory");
    out->descriptors.push_back({d.addr, d.len, w, host});
    (w ? writable : readable) += d.len;
    if (!(d.flags & kDescFlagNext)) break;
    if (d.next >= state_.size)
      return Status::InvalidArgument("descriptor next index " + std::to_string(d.next) +
                                     " is outside the table");
    index = d.next;
  }
  if (readable > UINT32_MAX || writable > UINT32_MAX)
    return Status::OutOfRange("descriptor chain total length overflows 32 bits");
  out->readable_len = static_cast<uint32_t>(readable);
  out->writable_len = static_cast<uint32_t>(writable);
  return Status::Ok();
}

Status Queue::AddUsed(const GuestMemory& mem, uint16_t head, uint32_t written_len) {
  if (broken_) return Status::FailedPrecondition("virtqueue is broken");
  if (head >= state_.size) return Status::InvalidArgument("used head outside the queue");
  uint16_t slot = state_.next_used % state_.size;
  VirtqUsedElem e{head, written_len};
  RETURN_IF_ERROR(mem.WriteObj(state_.used_ring + kRingHeader + 8ull * slot, e));
  ++state_.next_used;
  // Release: the element (and the data the device wrote) before the index.
  return mem.StoreRelease16(state_.used_ring + 2, state_.next_used);
}

bool Queue::NeedsInterrupt(const GuestMemory& mem) {
  // Our used->idx store must be visible before we read the driver's flags or
  // used_event, the mirror image of the fence in PublishAvailEvent.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint16_t now = state_.next_used;
  const uint16_t old = state_.signalled_used;
  const bool old_valid = state_.signalled_used_valid;
  if (old_valid && now == old) return false;  // nothing new since the last one
  state_.signalled_used = now;
  state_.signalled_used_valid = true;
  if (!state_.event_idx) {
    auto flags = mem.ReadObj<uint16_t>(state_.avail_ring);
    return !flags.ok() || !(*flags & kAvailFlagNoInterrupt);
  }
  if (!old_valid) return true;
  auto used_event = mem.ReadObj<uint16_t>(state_.avail_ring + kRingHeader + 2ull * state_.size);
  if (!used_event.ok()) return true;
  // vring_need_event: interrupt iff used_event lies in [old, now).
  return static_cast<uint16_t>(now - *used_event - 1) < static_cast<uint16_t>(now - old);
}

}  // namespace kubicle::vmm::devices::virtio
