// Device attach helpers of Vm: put each device on its bus, wire its interrupt
// (irqfd) and queue kicks (ioeventfd -> event loop), and announce virtio-mmio
// devices on the kernel command line. Shared by boot and (later) restore.
#include <fcntl.h>

#include <cstdio>

#include "common/log.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/devices/legacy/i8042.h"
#include "vmm/devices/legacy/serial.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/block_backend.h"
#include "vmm/devices/virtio/net.h"
#include "vmm/devices/virtio/net_tap.h"
#include "vmm/devices/virtio/rng.h"
#include "vmm/devices/virtio/vsock.h"
#include "vmm/irqfd_line.h"
#include "vmm/vm.h"

namespace kubicle::vmm {

namespace virtio = devices::virtio;
namespace legacy = devices::legacy;

namespace {

// The guest is untrusted: its console goes through a ConsoleLog (rotated,
// capped, rate limited) unless discarded.
Result<std::unique_ptr<legacy::ConsoleLog>> OpenSerialOutput(
    const std::string& path, const legacy::ConsoleLogLimits& limits) {
  if (path == "none") return std::unique_ptr<legacy::ConsoleLog>();
  if (path.empty()) {
    int fd = ::dup(STDOUT_FILENO);
    if (fd < 0) return Status::FromErrno("dup stdout");
    return legacy::ConsoleLog::ForFd(UniqueFd(fd), limits);
  }
  return legacy::ConsoleLog::Open(path, limits);
}

}  // namespace

Status Vm::AttachLegacyDevices() {
  ASSIGN_OR_RETURN(auto out, OpenSerialOutput(config_.serial_path, config_.serial_limits));
  ASSIGN_OR_RETURN(auto serial_irq, IrqfdLine::Create(*vm_fd_, arch::kSerialGsi));
  serial_ = std::make_shared<legacy::Serial>(serial_irq, std::move(out));
  RETURN_IF_ERROR(pio_bus_.Insert(serial_, arch::kSerialPort, 8));

  // The guest resets through the keyboard controller (reboot=k): that is how
  // a Linux guest without ACPI powers off or reboots; either way we stop.
  auto i8042 = std::make_shared<legacy::I8042>(
      [this] { RequestStop(ExitCode::kGuestShutdown, "guest reset via i8042"); });
  RETURN_IF_ERROR(pio_bus_.Insert(i8042, arch::kI8042DataPort, legacy::I8042::kPortSpan));
  return Status::Ok();
}

Status Vm::AttachVirtioDevices() {
  for (const DiskConfig& disk : config_.disks) RETURN_IF_ERROR(AttachDisk(disk));
  if (config_.workspace_slot) RETURN_IF_ERROR(AttachWorkspaceSlot());
  if (!config_.vsock_uds.empty()) {
    virtio::VsockConfig vsock_config;
    vsock_config.guest_cid = config_.guest_cid;
    vsock_config.uds_path = config_.vsock_uds;
    ::unlink(config_.vsock_uds.c_str());  // a stale socket from an earlier run
    ASSIGN_OR_RETURN(auto vsock, virtio::Vsock::Create(vsock_config));
    RETURN_IF_ERROR(AttachVirtio(std::move(vsock)));
  }
  if (config_.rng) RETURN_IF_ERROR(AttachVirtio(std::make_unique<virtio::Rng>()));
  if (config_.net) {
    const NetFlags& n = *config_.net;
    ASSIGN_OR_RETURN(auto tap, virtio::TapBackend::Open(n.tap, n.netns));
    virtio::NetConfig net_config;
    net_config.mac = n.mac;
    net_config.rx = {.bytes_per_sec = n.rx_bps, .packets_per_sec = n.rx_pps};
    net_config.tx = {.bytes_per_sec = n.tx_bps, .packets_per_sec = n.tx_pps};
    ASSIGN_OR_RETURN(auto net, virtio::Net::Create(std::move(tap), net_config));
    RETURN_IF_ERROR(AttachVirtio(std::move(net)));
  }
  return Status::Ok();
}

Status Vm::AttachVirtio(std::unique_ptr<virtio::VirtioDevice> device) {
  uint32_t slot = static_cast<uint32_t>(virtio_.size());
  if (slot >= arch::kMaxMmioDevices) return Status::ResourceExhausted("too many virtio devices");
  uint64_t base = arch::MmioDeviceAddr(slot);
  uint32_t gsi = arch::MmioDeviceGsi(slot);
  std::string name(device->name());

  ASSIGN_OR_RETURN(auto irq, IrqfdLine::Create(*vm_fd_, gsi));
  ASSIGN_OR_RETURN(std::shared_ptr<virtio::MmioTransport> transport,
                   virtio::MmioTransport::Create(std::move(device), *memory_, irq, loop_.get()));
  RETURN_IF_ERROR(mmio_bus_.Insert(transport, base, virtio::MmioTransport::kMmioSize));

  // Queue kicks are absorbed by KVM and delivered to the event loop: no exit
  // to user space on the vCPU for a notify.
  for (uint16_t q = 0; q < transport->num_queues(); ++q) {
    ASSIGN_OR_RETURN(EventFd kick, EventFd::Create());
    RETURN_IF_ERROR(vm_fd_->RegisterIoeventfd(
        kick.fd(), base + virtio::MmioTransport::kQueueNotifyOffset, 4, q));
    virtio::MmioTransport* t = transport.get();
    int fd = kick.fd();
    RETURN_IF_ERROR(loop_->Add(fd, [t, q, fd](uint32_t) {
      uint64_t v;
      if (::read(fd, &v, sizeof(v)) == sizeof(v)) t->NotifyQueue(q);
    }));
    notify_fds_.push_back(std::move(kick));
  }
  virtio_.push_back(std::move(transport));

  char decl[80];
  std::snprintf(decl, sizeof(decl), " virtio_mmio.device=4K@0x%llx:%u",
                static_cast<unsigned long long>(base), gsi);
  kernel_cmdline_ += decl;
  log::Debug("virtio device attached", {{"vm", config_.vm_id}, {"device", name}, {"gsi", gsi}});
  return Status::Ok();
}

}  // namespace kubicle::vmm
