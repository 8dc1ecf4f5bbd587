#include "vmm/devices/virtio/block.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "snapshot/byte_io.h"
#include "vmm/devices/virtio/chain_io.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/persist.h"

namespace kubicle::vmm::devices::virtio {
namespace {

template <typename T>
void Put(std::span<uint8_t> out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}

}  // namespace

Block::Block(std::unique_ptr<BlockBackend> backend, std::string id)
    : backend_(std::move(backend)), capacity_(backend_->size() / kSectorSize) {
  std::memcpy(id_.data(), id.data(), std::min(id.size(), kIdBytes));
  Put<uint64_t>(config_, 0, capacity_);
  Put<uint32_t>(config_, 8, kSizeMax);
  Put<uint32_t>(config_, 12, kSegMax);
  Put<uint32_t>(config_, 20, kSectorSize);
}

uint32_t Block::device_id() const { return kDeviceIdBlock; }

std::string Block::id() const {
  const auto end = std::find(id_.begin(), id_.end(), uint8_t{0});
  return std::string(id_.begin(), end);
}

uint64_t Block::device_features() const {
  uint64_t f = FeatureBit(kFeatureVersion1) | FeatureBit(kFeatureRingEventIdx) |
               FeatureBit(kFeatureBlkSizeMax) | FeatureBit(kFeatureBlkSegMax) |
               FeatureBit(kFeatureBlkFlush);
  if (backend_->read_only()) f |= FeatureBit(kFeatureBlkRo);
  return f;
}

void Block::ProcessQueue(uint16_t index) {
  DrainQueue(index, &chain_, [this](const DescriptorChain& chain) { return Execute(chain); });
}

void Block::LogReject(const char* why, uint64_t sector, uint64_t bytes) {
  if (!log_limiter_.Allow()) return;
  log::Warn("virtio-blk request rejected", {{"why", why},
                                            {"sector", sector},
                                            {"bytes", bytes},
                                            {"suppressed", log_limiter_.TakeSuppressed()}});
}

uint32_t Block::Execute(const DescriptorChain& chain) {
  if (chain.writable_len == 0) {
    LogReject("no room for the status byte", 0, 0);
    return 0;
  }
  ChainReader reader(chain);
  auto hdr = reader.ReadObj<BlkRequestHeader>();
  uint32_t data_written = 0;
  uint8_t status = kBlkStatusIoErr;
  if (!hdr.ok()) {
    LogReject("request header shorter than 16 bytes", 0, chain.readable_len);
  } else {
    status = Dispatch(chain, hdr->type, hdr->sector, &data_written);
  }
  // The status is the last writable byte, whatever the request wrote before.
  ChainWriter writer(chain);
  (void)writer.Skip(chain.writable_len - 1);
  (void)writer.WriteObj(status);
  return data_written + 1;
}

uint8_t Block::Dispatch(const DescriptorChain& chain, uint32_t type, uint64_t sector,
                        uint32_t* data_written) {
  switch (type) {
    case kBlkTypeIn: return DoIn(chain, sector, data_written);
    case kBlkTypeOut: return DoOut(chain, sector);
    case kBlkTypeFlush: return backend_->Flush().ok() ? kBlkStatusOk : kBlkStatusIoErr;
    case kBlkTypeGetId: return DoGetId(chain, data_written);
    default: LogReject("unsupported request type", sector, type); return kBlkStatusUnsupp;
  }
}

bool Block::InRange(uint64_t sector, uint64_t bytes) const {
  if (bytes % kSectorSize != 0) return false;
  return sector <= capacity_ && bytes / kSectorSize <= capacity_ - sector;
}

uint8_t Block::DoIn(const DescriptorChain& chain, uint64_t sector, uint32_t* data_written) {
  const uint64_t bytes = chain.writable_len - 1;  // everything but the status byte
  if (!InRange(sector, bytes)) {
    LogReject("read outside the disk or not whole sectors", sector, bytes);
    return kBlkStatusIoErr;
  }
  iov_.clear();
  ChainWriter(chain).Iovecs(bytes, &iov_);
  Status s = backend_->ReadV(sector * kSectorSize, iov_);
  if (!s.ok()) {
    log::Error("virtio-blk read failed", {{"sector", sector}, {"error", s.ToString()}});
    return kBlkStatusIoErr;
  }
  *data_written = static_cast<uint32_t>(bytes);
  return kBlkStatusOk;
}

uint8_t Block::DoOut(const DescriptorChain& chain, uint64_t sector) {
  const uint64_t bytes = chain.readable_len - sizeof(BlkRequestHeader);
  if (backend_->read_only()) {
    LogReject("write to a read-only disk", sector, bytes);
    return kBlkStatusIoErr;
  }
  if (!InRange(sector, bytes)) {
    LogReject("write outside the disk or not whole sectors", sector, bytes);
    return kBlkStatusIoErr;
  }
  ChainReader reader(chain);
  (void)reader.Skip(sizeof(BlkRequestHeader));
  iov_.clear();
  reader.Iovecs(bytes, &iov_);
  Status s = backend_->WriteV(sector * kSectorSize, iov_);
  if (!s.ok()) {
    log::Error("virtio-blk write failed", {{"sector", sector}, {"error", s.ToString()}});
    return kBlkStatusIoErr;
  }
  return kBlkStatusOk;
}

uint8_t Block::DoGetId(const DescriptorChain& chain, uint32_t* data_written) {
  if (chain.writable_len - 1 < kIdBytes) {
    LogReject("GET_ID buffer shorter than 20 bytes", 0, chain.writable_len);
    return kBlkStatusIoErr;
  }
  ChainWriter writer(chain);
  (void)writer.Write(id_.data(), kIdBytes);
  *data_written = kIdBytes;
  return kBlkStatusOk;
}

Status Block::ReplaceBackend(std::unique_ptr<BlockBackend> backend) {
  auto lock = LockTransport();
  if (backend->read_only() != backend_->read_only())
    return Status::FailedPrecondition("virtio-blk: a new backend cannot change the read-only flag");
  backend_ = std::move(backend);
  capacity_ = backend_->size() / kSectorSize;
  Put<uint64_t>(config_, 0, capacity_);
  if (context() != nullptr) context()->SignalConfigChange();
  return Status::Ok();
}

// ---- persist ----

std::vector<uint8_t> Block::EncodeState(const BlockState& b) {
  std::vector<uint8_t> out;
  snapshot::ByteWriter w(out);
  w.Bool(b.read_only);
  w.String(b.serial);
  w.String(b.chain.base_path);
  w.U64(b.chain.size);
  w.U32(static_cast<uint32_t>(b.chain.layers.size()));
  for (const snapshot::LayerRef& layer : b.chain.layers) {
    w.String(layer.path);
    w.Raw(layer.id.data(), layer.id.size());
  }
  return out;
}

Result<BlockState> Block::DecodeState(std::span<const uint8_t> bytes, bool newer_minor) {
  BlockState b;
  snapshot::ByteReader r(bytes, "virtio-blk state");
  r.Bool(&b.read_only, "block read_only");
  r.String(&b.serial, kMaxSavedString, "block serial");
  r.String(&b.chain.base_path, kMaxSavedString, "block base path");
  r.U64(&b.chain.size, "block size");
  uint32_t n = 0;
  if (r.Count(&n, kMaxSavedLayers, "block layer")) {
    b.chain.layers.resize(n);
    for (snapshot::LayerRef& layer : b.chain.layers) {
      r.String(&layer.path, kMaxSavedString, "layer path");
      r.Raw(layer.id.data(), layer.id.size(), "layer id");
    }
  }
  r.End(newer_minor);
  if (!r.ok()) return r.status();
  if (b.read_only && !b.chain.layers.empty())
    return Status::DataLoss("virtio-blk state: a read-only disk has layers");
  return b;
}

Result<std::vector<uint8_t>> Block::SaveState() const {
  std::optional<snapshot::DiskChain> chain = backend_->SavedChain();
  if (!chain) return Status::Unimplemented("virtio-blk: this disk's backend cannot be snapshotted");
  return EncodeState({backend_->read_only(), id(), std::move(*chain)});
}

Status Block::CheckSaved(std::span<const uint8_t> bytes, bool newer_minor) {
  return DecodeState(bytes, newer_minor).status();
}

Result<std::unique_ptr<VirtioDevice>> Block::Restore(std::span<const uint8_t> bytes,
                                                     bool newer_minor,
                                                     const DeviceResources& host) {
  ASSIGN_OR_RETURN(BlockState state, DecodeState(bytes, newer_minor));
  if (!host.open_disk)
    return Status::FailedPrecondition("the snapshot has a disk and no disk was given");
  ASSIGN_OR_RETURN(std::unique_ptr<BlockBackend> backend, host.open_disk(state));
  return std::unique_ptr<VirtioDevice>(std::make_unique<Block>(std::move(backend), state.serial));
}

}  // namespace kubicle::vmm::devices::virtio
