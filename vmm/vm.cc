#include "vmm/vm.h"

#include <signal.h>

#include "common/log.h"
#include "vmm/arch/x86_64/layout.h"
#include "snapshot/vcpu_state.h"
#include "vmm/devices/legacy/serial.h"

namespace kubicle::vmm {

Result<std::unique_ptr<Vm>> Vm::Create(const VmmConfig& config) {
  std::unique_ptr<Vm> vm(new Vm(config));
  RETURN_IF_ERROR(vm->BuildMachine());
  return vm;
}

Vm::~Vm() {
  if (vcpus_) vcpus_->Stop();
  if (loop_) loop_->Stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  JoinFlatten();
}

Status Vm::BuildMachine() {
  ASSIGN_OR_RETURN(kvm::Kvm kvm, kvm::Kvm::Open());
  kvm_.emplace(std::move(kvm));
  ASSIGN_OR_RETURN(supported_cpuid_, kvm_->SupportedCpuid());
  ASSIGN_OR_RETURN(kvm::VmFd vm_fd, kvm_->CreateVm());
  vm_fd_.emplace(std::move(vm_fd));
  RETURN_IF_ERROR(arch::ConfigureVm(*vm_fd_));

  RETURN_IF_ERROR(arch::ValidateMemorySize(config_.mem_bytes));
  ASSIGN_OR_RETURN(memory_, GuestMemory::CreateAnonymous(arch::MemoryRanges(config_.mem_bytes)));
  RETURN_IF_ERROR(arch::RegisterGuestMemory(*vm_fd_, *memory_));

  ASSIGN_OR_RETURN(loop_, EventLoop::Create());
  kernel_cmdline_ = config_.cmdline;
  RETURN_IF_ERROR(AttachLegacyDevices());
  RETURN_IF_ERROR(AttachVirtioDevices());

  arch::BootConfig boot{config_.kernel_path, std::nullopt, kernel_cmdline_,
                        static_cast<uint32_t>(config_.vcpus)};
  if (!config_.initrd_path.empty()) boot.initrd_path = config_.initrd_path;
  ASSIGN_OR_RETURN(boot_, arch::ConfigureBoot(*memory_, boot));
  return AttachControlSocket();
}

Status Vm::SetupVcpu(int index, kvm::VcpuFd& vcpu) {
  if (restore_state_) return snapshot::ApplyVcpu(vcpu, restore_state_->vcpus.at(index));
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

nlohmann::json Vm::Describe() const {
  nlohmann::json j;
  j["id"] = config_.vm_id;
  j["state"] = !vcpus_ ? "pooled" : vcpus_->paused() ? "paused" : "running";
  j["vcpus"] = config_.vcpus;
  j["mem_bytes"] = config_.mem_bytes;
  j["guest_cid"] = config_.guest_cid;
  j["pid"] = ::getpid();
  auto uptime = std::chrono::steady_clock::now() - started_at_;
  j["uptime_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(uptime).count();
  // Host ranges of guest RAM, so tools can tell VMM overhead from guest pages.
  nlohmann::json ranges = nlohmann::json::array();
  if (memory_) {
    for (const GuestRegion& r : memory_->regions())
      ranges.push_back({{"guest", r.guest_base}, {"host", reinterpret_cast<uintptr_t>(r.host)},
                        {"size", r.size}});
  }
  j["guest_memory"] = ranges;
  return j;
}

Status Vm::AttachControlSocket() {
  if (config_.control_path.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(control_, ControlServer::Listen(config_.control_path, loop_.get()));
  control_->Register("status", [this](const nlohmann::json&) -> Result<nlohmann::json> {
    return Describe();
  });
  control_->Register("pause", [this](const nlohmann::json&) -> Result<nlohmann::json> {
    RETURN_IF_ERROR(Pause());
    return Describe();
  });
  control_->Register("resume", [this](const nlohmann::json&) -> Result<nlohmann::json> {
    RETURN_IF_ERROR(Resume());
    return Describe();
  });
  control_->Register("snapshot", [this](const nlohmann::json& req) -> Result<nlohmann::json> {
    if (!req.contains("dir") || !req["dir"].is_string())
      return Status::InvalidArgument("snapshot needs \"dir\": a path");
    if (req.contains("resume") && !req["resume"].is_boolean())
      return Status::InvalidArgument("snapshot: \"resume\" must be true or false");
    bool resume = req.value("resume", true);
    RETURN_IF_ERROR(Snapshot(req["dir"].get<std::string>(), resume));
    nlohmann::json j = Describe();
    j["dir"] = req["dir"];
    return j;
  });
  control_->Register("fork", [this](const nlohmann::json& req) { return Fork(req); });
  control_->Register("shutdown", [this](const nlohmann::json&) -> Result<nlohmann::json> {
    RequestStop(ExitCode::kGuestShutdown, "shutdown command");
    return nlohmann::json::object();
  });
  return Status::Ok();
}

}  // namespace kubicle::vmm
