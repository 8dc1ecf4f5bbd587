// MemoryReservation: guest-memory address space set up ahead of time, so a
// restore does not pay KVM_SET_USER_MEMORY_REGION on its critical path.
//
// Why: registering a memory slot costs ~5-9 ms on our hosts whatever its
// size (KVM waits for an SRCU grace period), more than the whole restore
// budget. A pre-started VMM (the warm pool) reserves anonymous mappings for
// the guest RAM ranges and registers them with its VM; at restore, the
// snapshot's memory file is mapped MAP_PRIVATE | MAP_FIXED over the very
// same host addresses. KVM's memory slots hold host virtual addresses and
// follow mapping changes through MMU notifiers, so the slots stay valid and
// the guest sees the file's pages, faulted in lazily.
//
// Contracts:
// - Create the reservation before the VM's memory slots; register it with
//   RegisterWith (slot i = range i, as arch::RegisterGuestMemory numbers
//   them) while no vCPU runs.
// - MapFile / IntoAnonymous consume the reservation and return the
//   GuestMemory that now owns those addresses; the reservation is empty
//   afterwards. Destroying an unconsumed reservation unmaps it.
// - MapFile's ranges must equal the reserved ranges (the snapshot's
//   MachineConfig.memory); the same file-length checks as MapMemoryFile apply.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "snapshot/state.h"
#include "vmm/kvm/vm_fd.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm {

class MemoryReservation {
 public:
  static Result<MemoryReservation> Create(const std::vector<snapshot::MemoryRange>& ranges);
  MemoryReservation(MemoryReservation&& o) noexcept;
  MemoryReservation& operator=(MemoryReservation&& o) noexcept;
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;
  ~MemoryReservation();

  const std::vector<snapshot::MemoryRange>& ranges() const { return ranges_; }
  // KVM memory slot i for range i.
  Status RegisterWith(const kvm::VmFd& vm) const;
  // The memory file mapped MAP_PRIVATE over the reserved addresses.
  Result<std::unique_ptr<GuestMemory>> MapFile(const std::string& path,
                                               const std::vector<snapshot::MemoryRange>& ranges);
  // The reserved anonymous memory itself (a cold boot from the pool).
  Result<std::unique_ptr<GuestMemory>> IntoAnonymous();

 private:
  MemoryReservation() = default;
  void Release();

  std::vector<snapshot::MemoryRange> ranges_;
  std::vector<uint8_t*> hosts_;
};

}  // namespace kubicle::vmm
