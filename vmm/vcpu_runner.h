// VcpuRunner: one thread per vCPU running KVM_RUN and dispatching its exits
// (port I/O and MMIO) to the buses. VcpuSet coordinates them: start, pause
// (synchronous: returns once every vCPU is parked outside KVM_RUN, so vCPU
// and device state can be read consistently), resume and stop.
//
// A vCPU is kicked out of the guest by setting kvm_run.immediate_exit and
// sending it a signal (kKickSignal, whose handler does nothing); KVM_RUN then
// returns EINTR. A guest-initiated stop (shutdown, crash) is reported through
// the StopHandler exactly once per vCPU that saw it.
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "vmm/devices/bus.h"
#include "vmm/exit_code.h"
#include "vmm/kvm/vcpu_fd.h"

namespace kubicle::vmm {

class VcpuSet {
 public:
  using StopHandler = std::function<void(ExitCode code, const std::string& reason)>;
  // Runs on the vCPU's own thread before its first KVM_RUN (boot registers,
  // restored state). An error stops the VM with kSetupFailed.
  using SetupFn = std::function<Status(kvm::VcpuFd& vcpu)>;

  VcpuSet(const devices::Bus* pio, const devices::Bus* mmio, StopHandler on_stop);
  ~VcpuSet();  // stops and joins every thread

  // Installs the kick signal handler (process-wide, idempotent).
  static Status InstallKickHandler();

  // Starts one thread per vCPU; each runs setup then the guest. Returns once
  // every setup finished; the first setup error is returned (and all stop).
  Status Start(std::vector<kvm::VcpuFd> vcpus, SetupFn setup);
  // Parks every vCPU outside KVM_RUN; returns when all are parked.
  Status Pause();
  void Resume();
  // Runs fn on every vCPU's own thread while paused (state capture: KVM wants
  // vCPU state read on the vCPU thread); returns the first error.
  Status ForEachPaused(const std::function<Status(int index, kvm::VcpuFd&)>& fn);
  // Makes every thread leave its loop and joins them.
  void Stop();
  bool paused() const;
  size_t size() const { return threads_.size(); }

 private:
  struct Vcpu;
  void Loop(Vcpu* v);
  // Returns false when the vCPU must leave its loop.
  bool HandleExit(Vcpu* v);
  void Kick(Vcpu* v);
  void Park(Vcpu* v, std::unique_lock<std::mutex>& lock);

  const devices::Bus* pio_;
  const devices::Bus* mmio_;
  StopHandler on_stop_;
  std::vector<std::unique_ptr<Vcpu>> threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool pause_requested_ = false;
  bool stop_requested_ = false;
  size_t parked_ = 0;
  size_t setup_done_ = 0;
  Status setup_status_;
  // Work to run on each parked vCPU thread (ForEachPaused), and its progress.
  std::function<Status(int, kvm::VcpuFd&)> paused_work_;
  uint64_t work_generation_ = 0;
  size_t work_done_ = 0;
  Status work_status_;
};

}  // namespace kubicle::vmm
