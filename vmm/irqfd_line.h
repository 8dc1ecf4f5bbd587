// IrqfdLine: an InterruptLine backed by an eventfd registered with KVM as an
// irqfd for one GSI, so raising the interrupt is one write(2) from any thread
// and never a trip through the vCPU.
#pragma once

#include <memory>

#include "common/event_fd.h"
#include "vmm/devices/interrupt.h"
#include "vmm/kvm/vm_fd.h"

namespace kubicle::vmm {

class IrqfdLine final : public devices::InterruptLine {
 public:
  static Result<std::shared_ptr<IrqfdLine>> Create(const kvm::VmFd& vm, uint32_t gsi) {
    ASSIGN_OR_RETURN(EventFd efd, EventFd::Create());
    RETURN_IF_ERROR(vm.RegisterIrqfd(efd.fd(), gsi));
    return std::shared_ptr<IrqfdLine>(new IrqfdLine(std::move(efd), gsi));
  }
  Status Trigger() override { return efd_.Signal(); }
  uint32_t gsi() const { return gsi_; }

 private:
  IrqfdLine(EventFd efd, uint32_t gsi) : efd_(std::move(efd)), gsi_(gsi) {}
  EventFd efd_;
  uint32_t gsi_;
};

}  // namespace kubicle::vmm
