#include "vmm/kvm/vm_state.h"

#include <time.h>

namespace kubicle::vmm::kvm {

uint64_t HostRealtimeNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t AdvancedClock(uint64_t clock_ns, uint64_t captured_realtime_ns, uint64_t now_realtime_ns) {
  if (captured_realtime_ns == 0 || now_realtime_ns <= captured_realtime_ns) return clock_ns;
  return clock_ns + (now_realtime_ns - captured_realtime_ns);
}

Result<snapshot::VmState> CaptureVm(const VmFd& vm) {
  snapshot::VmState s;
  ASSIGN_OR_RETURN(s.pic_master, vm.GetIrqchip(KVM_IRQCHIP_PIC_MASTER));
  ASSIGN_OR_RETURN(s.pic_slave, vm.GetIrqchip(KVM_IRQCHIP_PIC_SLAVE));
  ASSIGN_OR_RETURN(s.ioapic, vm.GetIrqchip(KVM_IRQCHIP_IOAPIC));
  ASSIGN_OR_RETURN(s.pit, vm.GetPit2());
  ASSIGN_OR_RETURN(s.clock, vm.GetClock());
  // KVM pairs clock and wall time atomically only on TSC-clocksource hosts;
  // elsewhere the wall time read right after is within microseconds.
  s.captured_realtime_ns = (s.clock.flags & KVM_CLOCK_REALTIME) ? s.clock.realtime : HostRealtimeNs();
  return s;
}

Status ApplyVm(const VmFd& vm, const snapshot::VmState& s, ClockPolicy policy) {
  RETURN_IF_ERROR(vm.SetIrqchip(s.pic_master));
  RETURN_IF_ERROR(vm.SetIrqchip(s.pic_slave));
  RETURN_IF_ERROR(vm.SetIrqchip(s.ioapic));
  RETURN_IF_ERROR(vm.SetPit2(s.pit));
  kvm_clock_data clock{};
  clock.clock = s.clock.clock;
  if (policy == ClockPolicy::kAdvance && s.captured_realtime_ns != 0) {
    int adjust = vm.CheckExtension(KVM_CAP_ADJUST_CLOCK);
    if (adjust > 0 && (adjust & KVM_CLOCK_REALTIME)) {
      clock.flags = KVM_CLOCK_REALTIME;  // KVM adds (now - realtime) itself
      clock.realtime = s.captured_realtime_ns;
    } else {
      clock.clock = AdvancedClock(s.clock.clock, s.captured_realtime_ns, HostRealtimeNs());
    }
  }
  return vm.SetClock(clock);
}

}  // namespace kubicle::vmm::kvm
