#include "vmm/devices/virtio/mmio_transport.h"

#include <cstring>
#include <string>

#include "common/log.h"
#include "vmm/devices/virtio/layout.h"

namespace kubicle::vmm::devices::virtio {
namespace {

GuestAddress SetHalf(GuestAddress old, uint32_t v, bool high) {
  return high ? (old & 0xffffffffull) | (uint64_t{v} << 32) : (old & ~0xffffffffull) | v;
}

}  // namespace

Result<std::unique_ptr<MmioTransport>> MmioTransport::Create(std::unique_ptr<VirtioDevice> device,
                                                             const GuestMemory& memory,
                                                             std::shared_ptr<InterruptLine> irq,
                                                             EventLoop* loop) {
  if (!device || !irq) return Status::InvalidArgument("virtio-mmio needs a device and an irq");
  if (!(device->device_features() & FeatureBit(kFeatureVersion1)))
    return Status::InvalidArgument("virtio device does not offer VIRTIO_F_VERSION_1");
  if (device->num_queues() == 0) return Status::InvalidArgument("virtio device without queues");
  for (uint16_t i = 0; i < device->num_queues(); ++i) {
    uint16_t m = device->queue_max_size(i);
    if (m == 0 || (m & (m - 1)) || m > kMaxQueueSize)
      return Status::InvalidArgument("bad queue max size " + std::to_string(m));
  }
  const int host_fd = device->host_event_fd();
  if (host_fd >= 0 && loop == nullptr)
    return Status::InvalidArgument(std::string(device->name()) + " needs an event loop");
  std::unique_ptr<MmioTransport> t(
      new MmioTransport(std::move(device), memory, std::move(irq), loop));
  if (host_fd >= 0) {
    MmioTransport* raw = t.get();
    RETURN_IF_ERROR(loop->Add(host_fd, [raw](uint32_t) {
      std::lock_guard lock(raw->mu_);
      raw->device_->HandleHostEvent();
      raw->CheckBrokenQueues();
    }));
    t->host_fd_ = host_fd;
  }
  return t;
}

MmioTransport::MmioTransport(std::unique_ptr<VirtioDevice> device, const GuestMemory& memory,
                             std::shared_ptr<InterruptLine> irq, EventLoop* loop)
    : device_(std::move(device)), memory_(memory), irq_(std::move(irq)), loop_(loop) {
  for (uint16_t i = 0; i < device_->num_queues(); ++i) queues_.emplace_back(device_->queue_max_size(i));
  device_->context_ = this;
}

MmioTransport::~MmioTransport() {
  std::lock_guard lock(mu_);
  if (host_fd_ >= 0) (void)loop_->Remove(host_fd_);
  if (active_) device_->Reset();
  device_->context_ = nullptr;
}

bool MmioTransport::active() const {
  std::lock_guard lock(mu_);
  return active_;
}

uint32_t MmioTransport::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

void MmioTransport::LogBadAccess(const char* what, uint64_t offset, size_t size) {
  if (!log_limiter_.Allow()) return;
  log::Warn("virtio-mmio bad access", {{"device", device_->name()},
                                       {"what", what},
                                       {"offset", offset},
                                       {"size", size},
                                       {"suppressed", log_limiter_.TakeSuppressed()}});
}

void MmioTransport::Read(uint64_t offset, std::span<uint8_t> data) {
  std::memset(data.data(), 0, data.size());
  std::lock_guard lock(mu_);
  if (offset >= kConfigOffset) {
    const size_t n = data.size();
    if ((n != 1 && n != 2 && n != 4 && n != 8) || offset % n != 0 || offset + n > kMmioSize)
      return LogBadAccess("config read", offset, n);
    device_->ReadConfig(offset - kConfigOffset, data);
    return;
  }
  if (data.size() != 4 || offset % 4 != 0) return LogBadAccess("register read", offset, data.size());
  uint32_t v = ReadRegister(offset);
  std::memcpy(data.data(), &v, 4);
}

void MmioTransport::Write(uint64_t offset, std::span<const uint8_t> data) {
  std::lock_guard lock(mu_);
  if (offset >= kConfigOffset) {
    const size_t n = data.size();
    if ((n != 1 && n != 2 && n != 4 && n != 8) || offset % n != 0 || offset + n > kMmioSize)
      return LogBadAccess("config write", offset, n);
    device_->WriteConfig(offset - kConfigOffset, data);
    return;
  }
  if (data.size() != 4 || offset % 4 != 0)
    return LogBadAccess("register write", offset, data.size());
  uint32_t v;
  std::memcpy(&v, data.data(), 4);
  WriteRegister(offset, v);
}

Queue* MmioTransport::SelectedQueue() {
  return queue_sel_ < queues_.size() ? &queues_[queue_sel_] : nullptr;
}

uint32_t MmioTransport::ReadRegister(uint64_t offset) {
  Queue* q = SelectedQueue();
  switch (offset) {
    case mmio::kMagicValue: return kMagic;
    case mmio::kVersion: return mmio::kVersionModern;
    case mmio::kDeviceId: return device_->device_id();
    case mmio::kVendorId: return kVendorId;
    case mmio::kDeviceFeatures:
      if (device_features_sel_ > 1) return 0;
      return static_cast<uint32_t>(device_->device_features() >> (32 * device_features_sel_));
    case mmio::kQueueNumMax: return q ? q->max_size() : 0;
    case mmio::kQueueNum: return q ? q->state().size : 0;
    case mmio::kQueueReady: return q && q->ready() ? 1 : 0;
    case mmio::kQueueDescLow: return q ? static_cast<uint32_t>(q->state().desc_table) : 0;
    case mmio::kQueueDescHigh: return q ? static_cast<uint32_t>(q->state().desc_table >> 32) : 0;
    case mmio::kQueueDriverLow: return q ? static_cast<uint32_t>(q->state().avail_ring) : 0;
    case mmio::kQueueDriverHigh: return q ? static_cast<uint32_t>(q->state().avail_ring >> 32) : 0;
    case mmio::kQueueDeviceLow: return q ? static_cast<uint32_t>(q->state().used_ring) : 0;
    case mmio::kQueueDeviceHigh: return q ? static_cast<uint32_t>(q->state().used_ring >> 32) : 0;
    case mmio::kInterruptStatus: return interrupt_status_;
    case mmio::kStatus: return status_;
    case mmio::kShmLenLow:
    case mmio::kShmLenHigh: return 0xffffffff;  // no shared memory regions
    case mmio::kShmBaseLow:
    case mmio::kShmBaseHigh: return 0xffffffff;
    case mmio::kConfigGeneration: return config_generation_;
    default: LogBadAccess("unknown register read", offset, 4); return 0;
  }
}

void MmioTransport::WriteRegister(uint64_t offset, uint32_t value) {
  switch (offset) {
    case mmio::kDeviceFeaturesSel: device_features_sel_ = value; return;
    case mmio::kDriverFeaturesSel: driver_features_sel_ = value; return;
    case mmio::kDriverFeatures:
      if ((status_ & kStatusDriver) == 0 || (status_ & kStatusFeaturesOk) != 0 ||
          driver_features_sel_ > 1)
        return LogBadAccess("driver features write out of sequence", offset, 4);
      if (driver_features_sel_ == 0) {
        driver_features_ = (driver_features_ & ~0xffffffffull) | value;
      } else {
        driver_features_ = (driver_features_ & 0xffffffffull) | (uint64_t{value} << 32);
      }
      return;
    case mmio::kQueueSel: queue_sel_ = value; return;
    case mmio::kQueueNotify: NotifyQueueLocked(value); return;
    case mmio::kInterruptAck: interrupt_status_ &= ~value; return;
    case mmio::kStatus: SetStatus(value); return;
    case mmio::kShmSel: return;
    case mmio::kQueueNum:
    case mmio::kQueueReady:
    case mmio::kQueueDescLow:
    case mmio::kQueueDescHigh:
    case mmio::kQueueDriverLow:
    case mmio::kQueueDriverHigh:
    case mmio::kQueueDeviceLow:
    case mmio::kQueueDeviceHigh: WriteQueueRegister(offset, value); return;
    default: LogBadAccess("unknown register write", offset, 4); return;
  }
}

void MmioTransport::WriteQueueRegister(uint64_t offset, uint32_t value) {
  Queue* q = SelectedQueue();
  // Queues are configured between FEATURES_OK and DRIVER_OK (spec 4.2.3.2).
  if (q == nullptr || (status_ & kStatusFeaturesOk) == 0 || (status_ & kStatusDriverOk) != 0)
    return LogBadAccess("queue register write out of sequence", offset, 4);
  if (offset == mmio::kQueueReady) return q->set_ready(value == 1);
  if (q->ready()) return LogBadAccess("queue register write on a ready queue", offset, 4);
  const QueueState& s = q->state();
  switch (offset) {
    case mmio::kQueueNum:
      if (value > q->max_size()) return LogBadAccess("queue size above QueueNumMax", offset, 4);
      q->set_size(static_cast<uint16_t>(value));
      return;
    case mmio::kQueueDescLow:
    case mmio::kQueueDescHigh:
      q->set_desc_table(SetHalf(s.desc_table, value, offset == mmio::kQueueDescHigh));
      return;
    case mmio::kQueueDriverLow:
    case mmio::kQueueDriverHigh:
      q->set_avail_ring(SetHalf(s.avail_ring, value, offset == mmio::kQueueDriverHigh));
      return;
    case mmio::kQueueDeviceLow:
    case mmio::kQueueDeviceHigh:
      q->set_used_ring(SetHalf(s.used_ring, value, offset == mmio::kQueueDeviceHigh));
      return;
  }
}

bool MmioTransport::AcceptFeatures() {
  const uint64_t offered = device_->device_features();
  if ((status_ & kStatusDriver) == 0) return false;
  if (driver_features_ & ~offered) {
    log::Warn("virtio driver accepted features the device did not offer",
              {{"device", device_->name()}, {"features", driver_features_}});
    return false;
  }
  if (!(driver_features_ & FeatureBit(kFeatureVersion1))) {
    log::Warn("virtio driver is not VIRTIO_F_VERSION_1 (legacy drivers are not supported)",
              {{"device", device_->name()}});
    return false;
  }
  return true;
}

void MmioTransport::SetStatus(uint32_t value) {
  if (value == 0) return ResetLocked();
  if ((value & status_) != status_) {
    // Only Status = 0 may clear bits (spec 2.1.2).
    return LogBadAccess("status write clears bits", mmio::kStatus, 4);
  }
  uint32_t added = value & ~status_;
  if (added & kStatusFailed) log::Warn("virtio driver gave up", {{"device", device_->name()}});
  if ((added & kStatusFeaturesOk) && !AcceptFeatures()) value &= ~kStatusFeaturesOk;
  if ((added & kStatusDriverOk) && !(value & kStatusFeaturesOk)) {
    LogBadAccess("DRIVER_OK without FEATURES_OK", mmio::kStatus, 4);
    value &= ~kStatusDriverOk;
  }
  status_ = value;
  if ((added & kStatusDriverOk) && (value & kStatusDriverOk) && !(value & kStatusFailed)) {
    Status s = ActivateDevice();
    if (!s.ok()) SetNeedsReset(s.ToString());
  }
}

Status MmioTransport::ActivateDevice() {
  const bool event_idx = (driver_features_ & FeatureBit(kFeatureRingEventIdx)) != 0;
  for (size_t i = 0; i < queues_.size(); ++i) {
    Queue& q = queues_[i];
    if (!q.ready()) return Status::FailedPrecondition("queue " + std::to_string(i) + " not ready");
    RETURN_IF_ERROR(q.Validate(memory_).WithContext("queue " + std::to_string(i)));
    q.set_event_idx(event_idx);
  }
  RETURN_IF_ERROR(device_->Activate());
  active_ = true;
  log::Info("virtio device activated",
            {{"device", device_->name()}, {"features", driver_features_}});
  return Status::Ok();
}

void MmioTransport::ResetLocked() {
  if (active_) device_->Reset();
  active_ = false;
  for (Queue& q : queues_) q.Reset();
  status_ = 0;
  device_features_sel_ = driver_features_sel_ = 0;
  driver_features_ = 0;
  queue_sel_ = 0;
  interrupt_status_ = 0;
}

void MmioTransport::NotifyQueue(uint16_t index) {
  std::lock_guard lock(mu_);
  NotifyQueueLocked(index);
}

void MmioTransport::NotifyQueueLocked(uint32_t index) {
  if (!active_ || index >= queues_.size()) {
    if (log_limiter_.Allow())
      log::Warn("virtio queue notify ignored", {{"device", device_->name()},
                                                {"queue", index},
                                                {"active", active_ ? 1 : 0},
                                                {"suppressed", log_limiter_.TakeSuppressed()}});
    return;
  }
  if (queues_[index].broken()) return;
  device_->ProcessQueue(static_cast<uint16_t>(index));
  CheckBrokenQueues();
}

void MmioTransport::CheckBrokenQueues() {
  if (!active_ || (status_ & kStatusDeviceNeedsReset)) return;
  for (size_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i].broken())
      return SetNeedsReset("queue " + std::to_string(i) + ": " + queues_[i].broken_reason());
  }
}

void MmioTransport::KickQueues() {
  std::lock_guard lock(mu_);
  if (!active_) return;
  for (uint16_t i = 0; i < queues_.size(); ++i)
    if (!queues_[i].broken()) device_->ProcessQueue(i);
  CheckBrokenQueues();
  RaiseInterrupt(kInterruptUsedBuffer);
}

void MmioTransport::RaiseInterrupt(uint32_t bits) {
  interrupt_status_ |= bits;
  Status s = irq_->Trigger();
  if (!s.ok() && log_limiter_.Allow())
    log::Error("virtio interrupt failed", {{"device", device_->name()}, {"error", s.ToString()}});
}

void MmioTransport::SignalUsed(uint16_t index) {
  if (queues_[index].NeedsInterrupt(memory_)) RaiseInterrupt(kInterruptUsedBuffer);
}

void MmioTransport::SignalConfigChange() {
  ++config_generation_;
  if (active_) RaiseInterrupt(kInterruptConfigChange);
}

void MmioTransport::SetNeedsReset(std::string_view reason) {
  log::Warn("virtio device needs reset", {{"device", device_->name()}, {"reason", reason}});
  if (status_ & kStatusDeviceNeedsReset) return;
  status_ |= kStatusDeviceNeedsReset;
  if (status_ & kStatusDriverOk) RaiseInterrupt(kInterruptConfigChange);
}

MmioTransportState MmioTransport::SaveState() const {
  std::lock_guard lock(mu_);
  MmioTransportState s{status_,          device_features_sel_, driver_features_sel_,
                       driver_features_, queue_sel_,           interrupt_status_,
                       config_generation_, {}};
  for (const Queue& q : queues_) s.queues.push_back(q.state());
  return s;
}

Status MmioTransport::RestoreState(const MmioTransportState& state) {
  std::lock_guard lock(mu_);
  if (state.queues.size() != queues_.size())
    return Status::InvalidArgument("transport state has the wrong number of queues");
  ResetLocked();
  status_ = state.status;
  device_features_sel_ = state.device_features_sel;
  driver_features_sel_ = state.driver_features_sel;
  driver_features_ = state.driver_features;
  queue_sel_ = state.queue_sel;
  interrupt_status_ = state.interrupt_status;
  config_generation_ = state.config_generation;
  for (size_t i = 0; i < queues_.size(); ++i) queues_[i].Restore(state.queues[i]);
  if ((status_ & kStatusDriverOk) && !(status_ & (kStatusDeviceNeedsReset | kStatusFailed))) {
    if (!AcceptFeatures()) return Status::InvalidArgument("restored features are not acceptable");
    RETURN_IF_ERROR(ActivateDevice().WithContext("restoring " + std::string(device_->name())));
  }
  return Status::Ok();
}

}  // namespace kubicle::vmm::devices::virtio
