#include "vmm/vcpu_runner.h"

#include <signal.h>

#include <cstring>

#include "common/log.h"

namespace kubicle::vmm {
namespace {

const int kKickSignal = SIGRTMIN + 1;

void NoopHandler(int) {}

const char* ExitReasonName(uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_SHUTDOWN: return "triple fault (KVM_EXIT_SHUTDOWN)";
    case KVM_EXIT_FAIL_ENTRY: return "VM entry failed (KVM_EXIT_FAIL_ENTRY)";
    case KVM_EXIT_INTERNAL_ERROR: return "KVM internal error (KVM_EXIT_INTERNAL_ERROR)";
    case KVM_EXIT_HLT: return "guest halted without an irqchip (KVM_EXIT_HLT)";
    default: return "unexpected KVM exit";
  }
}

}  // namespace

struct VcpuSet::Vcpu {
  int index;
  kvm::VcpuFd fd;
  std::thread thread;
  pthread_t handle{};
  uint64_t work_seen = 0;
};

VcpuSet::VcpuSet(const devices::Bus* pio, const devices::Bus* mmio, StopHandler on_stop)
    : pio_(pio), mmio_(mmio), on_stop_(std::move(on_stop)) {}

VcpuSet::~VcpuSet() { Stop(); }

Status VcpuSet::InstallKickHandler() {
  struct sigaction sa{};
  sa.sa_handler = NoopHandler;  // no SA_RESTART: KVM_RUN must return EINTR
  sigemptyset(&sa.sa_mask);
  if (::sigaction(kKickSignal, &sa, nullptr) < 0) return Status::FromErrno("sigaction");
  return Status::Ok();
}

Status VcpuSet::Start(std::vector<kvm::VcpuFd> vcpus, SetupFn setup) {
  RETURN_IF_ERROR(InstallKickHandler());
  size_t n = vcpus.size();
  for (size_t i = 0; i < n; ++i) {
    auto v = std::make_unique<Vcpu>(Vcpu{static_cast<int>(i), std::move(vcpus[i]), {}, {}, 0});
    threads_.push_back(std::move(v));
  }
  for (auto& v : threads_) {
    Vcpu* raw = v.get();
    raw->thread = std::thread([this, raw, setup] {
      Status st = setup(raw->fd);
      {
        std::lock_guard lock(mu_);
        if (!st.ok() && setup_status_.ok()) setup_status_ = st;
        setup_done_++;
      }
      cv_.notify_all();
      if (st.ok()) Loop(raw);
    });
    raw->handle = raw->thread.native_handle();
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return setup_done_ == n; });
  Status result = setup_status_;
  lock.unlock();
  if (!result.ok()) Stop();
  return result;
}

void VcpuSet::Kick(Vcpu* v) {
  v->fd.SetImmediateExit(true);
  ::pthread_kill(v->handle, kKickSignal);
}

void VcpuSet::Park(Vcpu* v, std::unique_lock<std::mutex>& lock) {
  parked_++;
  cv_.notify_all();
  while (pause_requested_ && !stop_requested_) {
    if (paused_work_ && v->work_seen != work_generation_) {
      v->work_seen = work_generation_;
      Status st = paused_work_(v->index, v->fd);
      if (!st.ok() && work_status_.ok()) work_status_ = st;
      work_done_++;
      cv_.notify_all();
      continue;
    }
    cv_.wait(lock);
  }
  parked_--;
}

void VcpuSet::Loop(Vcpu* v) {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (stop_requested_) return;
      if (pause_requested_) {
        Park(v, lock);
        if (stop_requested_) return;
      }
      v->fd.SetImmediateExit(false);
    }
    Status st = v->fd.Run();
    if (kvm::VcpuFd::IsInterrupted(st) || (!st.ok() && st.error_number() == EAGAIN)) continue;
    if (!st.ok()) {
      log::Error("vcpu run failed", {{"vcpu", v->index}, {"error", st.ToString()}});
      on_stop_(ExitCode::kInternal, "KVM_RUN failed: " + st.ToString());
      return;
    }
    if (!HandleExit(v)) return;
  }
}

bool VcpuSet::HandleExit(Vcpu* v) {
  kvm_run* run = v->fd.run();
  switch (run->exit_reason) {
    case KVM_EXIT_IO: {
      uint8_t* data = reinterpret_cast<uint8_t*>(run) + run->io.data_offset;
      for (uint32_t i = 0; i < run->io.count; ++i, data += run->io.size) {
        if (run->io.direction == KVM_EXIT_IO_OUT) {
          pio_->Write(run->io.port, {data, run->io.size});
        } else {
          pio_->Read(run->io.port, {data, run->io.size});
        }
      }
      return true;
    }
    case KVM_EXIT_MMIO: {
      uint32_t len = std::min<uint32_t>(run->mmio.len, sizeof(run->mmio.data));
      if (run->mmio.is_write) {
        mmio_->Write(run->mmio.phys_addr, {run->mmio.data, len});
      } else {
        mmio_->Read(run->mmio.phys_addr, {run->mmio.data, len});
      }
      return true;
    }
    case KVM_EXIT_SYSTEM_EVENT: {
      uint32_t type = run->system_event.type;
      if (type == KVM_SYSTEM_EVENT_CRASH) {
        on_stop_(ExitCode::kGuestCrashed, "guest reported a crash");
      } else {
        on_stop_(ExitCode::kGuestShutdown, type == KVM_SYSTEM_EVENT_RESET ? "guest reset" : "guest power-off");
      }
      return false;
    }
    case KVM_EXIT_INTR:
      return true;
    default: {
      std::string reason = ExitReasonName(run->exit_reason);
      if (run->exit_reason == KVM_EXIT_INTERNAL_ERROR)
        reason += " suberror=" + std::to_string(run->internal.suberror);
      if (run->exit_reason == KVM_EXIT_FAIL_ENTRY)
        reason += " reason=" + std::to_string(run->fail_entry.hardware_entry_failure_reason);
      log::Error("vcpu stopped", {{"vcpu", v->index}, {"exit", run->exit_reason}, {"reason", reason}});
      on_stop_(ExitCode::kGuestCrashed, reason);
      return false;
    }
  }
}

Status VcpuSet::Pause() {
  std::unique_lock lock(mu_);
  if (stop_requested_) return Status::FailedPrecondition("vm is stopping");
  pause_requested_ = true;
  for (auto& v : threads_) Kick(v.get());
  // A vCPU whose thread already left its loop (guest stop) never parks.
  bool ok = cv_.wait_for(lock, std::chrono::seconds(5),
                         [&] { return parked_ == threads_.size() || stop_requested_; });
  if (!ok) return Status::DeadlineExceeded("vcpus did not pause within 5 s");
  if (stop_requested_) return Status::FailedPrecondition("vm is stopping");
  return Status::Ok();
}

void VcpuSet::Resume() {
  std::lock_guard lock(mu_);
  pause_requested_ = false;
  cv_.notify_all();
}

bool VcpuSet::paused() const {
  std::lock_guard lock(mu_);
  return pause_requested_ && parked_ == threads_.size();
}

Status VcpuSet::ForEachPaused(const std::function<Status(int, kvm::VcpuFd&)>& fn) {
  std::unique_lock lock(mu_);
  if (!pause_requested_ || parked_ != threads_.size())
    return Status::FailedPrecondition("vcpus are not paused");
  paused_work_ = fn;
  work_generation_++;
  work_done_ = 0;
  work_status_ = Status::Ok();
  cv_.notify_all();
  cv_.wait(lock, [&] { return work_done_ == threads_.size() || stop_requested_; });
  paused_work_ = nullptr;
  return stop_requested_ ? Status::FailedPrecondition("vm is stopping") : work_status_;
}

void VcpuSet::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_requested_ = true;
    cv_.notify_all();
    for (auto& v : threads_)
      if (v->thread.joinable()) Kick(v.get());
  }
  for (auto& v : threads_)
    if (v->thread.joinable() && v->thread.get_id() != std::this_thread::get_id()) v->thread.join();
}

}  // namespace kubicle::vmm
