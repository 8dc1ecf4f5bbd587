#include "vmm/vm.h"

#include <signal.h>
#include <string.h>

#include "common/log.h"
#include "common/stop_signals.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/kvm/vcpu_state.h"
#include "vmm/devices/legacy/serial.h"

namespace kubicle::vmm {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

Vm::~Vm() {
  if (vcpus_) vcpus_->Stop();
  if (loop_) loop_->Stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  JoinFlatten();
}

void Vm::StopOnSignals() {
  const StopSignals signals({SIGTERM, SIGINT, SIGHUP});
  std::thread([this, signals] {
    const int sig = signals.Wait();
    RequestStop(ExitCode::kGuestShutdown, std::string("signal ") + strsignal(sig));
  }).detach();
}

Status Vm::SetupVcpu(int index, kvm::VcpuFd& vcpu) {
  if (restore_state_) return kvm::ApplyVcpu(vcpu, restore_state_->vcpus.at(index));
  return arch::SetupVcpu(*kvm_, vcpu, static_cast<uint32_t>(index),
                         static_cast<uint32_t>(config_.vcpus), boot_, supported_cpuid_);
}

Status Vm::Start() {
  started_at_ = std::chrono::steady_clock::now();
  loop_thread_ = std::thread([this] {
    Status st = loop_->Run();
    if (!st.ok()) RequestStop(ExitCode::kInternal, "event loop failed: " + st.ToString());
  });
  if (pooled_) {
    log::Info("vm pooled", {{"vm", config_.vm_id}, {"vcpus", config_.vcpus},
                            {"mem_mib", config_.mem_bytes >> 20}});
    return Status::Ok();
  }
  std::vector<kvm::VcpuFd> fds;
  for (int i = 0; i < config_.vcpus; ++i) {
    ASSIGN_OR_RETURN(kvm::VcpuFd fd, vm_fd_->CreateVcpu(static_cast<uint32_t>(i)));
    fds.push_back(std::move(fd));
  }
  return StartVcpus(std::move(fds));
}

Status Vm::StartVcpus(std::vector<kvm::VcpuFd> fds) {
  vcpus_ = std::make_unique<VcpuSet>(&pio_bus_, &mmio_bus_,
                                     [this](ExitCode code, const std::string& reason) {
                                       RequestStop(code, reason);
                                     });
  RETURN_IF_ERROR(vcpus_->Start(std::move(fds),
                                [this](kvm::VcpuFd& fd) { return SetupVcpu(fd.id(), fd); }));
  if (restore_state_) {
    // Every vCPU's LAPIC is restored now: an interrupt raised here is not
    // overwritten. Drain what the guest queued before the snapshot and tell
    // it to look (a stale event index must not leave a queue silent).
    for (auto& t : virtio_) t->KickQueues();
  }
  log::Info("vm started", {{"vm", config_.vm_id}, {"vcpus", config_.vcpus},
                           {"mem_mib", config_.mem_bytes >> 20}, {"entry", boot_.entry},
                           {"restored", restore_state_ != nullptr}});
  return Status::Ok();
}

Status Vm::Pause() {
  if (!vcpus_) return Status::FailedPrecondition("vm is not started");
  RETURN_IF_ERROR(vcpus_->Pause());
  log::Info("vm paused", {{"vm", config_.vm_id}});
  return Status::Ok();
}

Status Vm::Resume() {
  if (!vcpus_) return Status::FailedPrecondition("vm is not started");
  vcpus_->Resume();
  log::Info("vm resumed", {{"vm", config_.vm_id}});
  return Status::Ok();
}

void Vm::RequestStop(ExitCode code, const std::string& reason) {
  std::lock_guard lock(stop_mu_);
  if (stop_) return;
  stop_.emplace(code, reason);
  stop_cv_.notify_all();
}

ExitCode Vm::WaitForStop() {
  std::pair<ExitCode, std::string> stop;
  {
    std::unique_lock lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_.has_value(); });
    stop = *stop_;
  }
  log::Info("vm stopping", {{"vm", config_.vm_id}, {"code", static_cast<int>(stop.first)},
                            {"reason", stop.second}});
  if (vcpus_) vcpus_->Stop();
  loop_->Stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  control_.reset();
  JoinFlatten();
  RemoveOverlays();
  return stop.first;
}

control::VmStatus Vm::Describe() const {
  control::VmStatus s;
  s.id = config_.vm_id;
  s.state = !vcpus_ ? control::VmState::kPooled
            : vcpus_->paused() ? control::VmState::kPaused
                               : control::VmState::kRunning;
  s.vcpus = config_.vcpus;
  s.mem_bytes = config_.mem_bytes;
  s.guest_cid = config_.guest_cid;
  s.pid = ::getpid();
  auto uptime = std::chrono::steady_clock::now() - started_at_;
  s.uptime_ms = std::chrono::duration_cast<std::chrono::milliseconds>(uptime).count();
  // Host ranges of guest RAM, so tools can tell VMM overhead from guest pages.
  if (memory_) {
    for (const GuestRegion& r : memory_->regions())
      s.guest_memory.push_back({r.guest_base, reinterpret_cast<uintptr_t>(r.host), r.size});
  }
  return s;
}

Status Vm::AttachControlSocket() {
  if (config_.control_path.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(control_, ControlServer::Listen(config_.control_path, loop_.get(),
                                                   [this](const control::Request& request) {
                                                     return HandleControl(request);
                                                   }));
  return Status::Ok();
}

Result<control::Reply> Vm::HandleControl(const control::Request& request) {
  using control::Reply;
  return std::visit(
      Overloaded{
          [this](const control::StatusRequest&) -> Result<Reply> { return Reply{Describe()}; },
          [this](const control::PauseRequest&) -> Result<Reply> {
            RETURN_IF_ERROR(Pause());
            return Reply{Describe()};
          },
          [this](const control::ResumeRequest&) -> Result<Reply> {
            RETURN_IF_ERROR(Resume());
            return Reply{Describe()};
          },
          [this](const control::SnapshotRequest& r) -> Result<Reply> {
            RETURN_IF_ERROR(Snapshot(r.dir, r.resume));
            return Reply{control::SnapshotReply{Describe(), r.dir}};
          },
          [this](const control::RestoreRequest& r) -> Result<Reply> {
            if (!pooled_)
              return Status::FailedPrecondition("restore: only a pool VM (kubicle-vmm pool) "
                                                "restores a snapshot on request");
            ASSIGN_OR_RETURN(control::RestoreReply reply, RestoreFromPool(r));
            return Reply{std::move(reply)};
          },
          [this](const control::ForkRequest& r) -> Result<Reply> {
            ASSIGN_OR_RETURN(control::ForkReply reply, Fork(r));
            return Reply{std::move(reply)};
          },
          [this](const control::ShutdownRequest&) -> Result<Reply> {
            RequestStop(ExitCode::kGuestShutdown, "shutdown command");
            return Reply{control::ShutdownReply{}};
          },
      },
      request);
}

}  // namespace kubicle::vmm
