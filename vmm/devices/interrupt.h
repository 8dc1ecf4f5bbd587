// InterruptLine: how a device raises its interrupt. In kubicle-vmm it is an
// irqfd bound to a GSI of the in-kernel irqchip; in unit tests a counter.
#pragma once

#include "common/status.h"

namespace kubicle::vmm::devices {

class InterruptLine {
 public:
  virtual ~InterruptLine() = default;
  // Raises the (edge) interrupt. Safe to call from any thread.
  virtual Status Trigger() = 0;
};

}  // namespace kubicle::vmm::devices
