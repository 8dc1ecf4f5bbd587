// Disks of Vm (docs/vmm.md, "Disks, snapshots and fork"): virtio-blk devices
// over raw images or copy-on-write LayeredDisks. With --layer-dir every
// writable disk is a LayeredDisk whose base is the image (never written) and
// whose writes go to a private overlay in the layer dir. Snapshot and fork
// freeze that overlay into a shared read-only layer (O(1) beyond syncing it)
// and continue on a fresh overlay; the state records the frozen chain, and a
// restored VM or fork child opens the chain with an overlay of its own.
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>

#include "common/log.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/block_backend.h"
#include "vmm/vm.h"

namespace kubicle::vmm {

namespace virtio = devices::virtio;

namespace {

// vm ids come from the command line: keep file names to a safe alphabet.
std::string SafeName(const std::string& id) {
  std::string out;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.substr(0, 64);
}

// A copy-on-write disk (snapshot::LayeredDisk) as virtio-blk's backend: the
// snapshot layer knows files and bytes, not virtio.
class LayeredBackend final : public virtio::BlockBackend {
 public:
  explicit LayeredBackend(std::unique_ptr<snapshot::LayeredDisk> disk) : disk_(std::move(disk)) {}
  uint64_t size() const override { return disk_->size(); }
  bool read_only() const override { return false; }
  Status ReadV(uint64_t offset, std::span<const iovec> iov) override {
    return disk_->ReadV(offset, iov);
  }
  Status WriteV(uint64_t offset, std::span<const iovec> iov) override {
    return disk_->WriteV(offset, iov);
  }
  Status Flush() override { return disk_->Flush(); }
  // The frozen chain (the live overlay is private and never part of it).
  std::optional<snapshot::DiskChain> SavedChain() const override { return disk_->chain(); }

 private:
  std::unique_ptr<snapshot::LayeredDisk> disk_;
};

}  // namespace

std::string Vm::NewOverlayPath(uint32_t slot) const {
  uint64_t r = 0;
  if (::getrandom(&r, sizeof(r), 0) != sizeof(r)) r = static_cast<uint64_t>(::getpid()) << 32;
  char suffix[24];
  std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(r));
  return config_.layer_dir + "/" + SafeName(config_.vm_id) + ".disk" + std::to_string(slot) +
         "." + suffix + ".layer";
}

Status Vm::AttachDisk(const DiskConfig& disk) {
  const auto slot = static_cast<uint32_t>(virtio_.size());
  DiskSlot d{slot, nullptr, disk.path, disk.read_only};
  std::unique_ptr<virtio::BlockBackend> backend;
  if (!disk.read_only && !config_.layer_dir.empty()) {
    snapshot::DiskChain chain{disk.path, 0, {}};
    ASSIGN_OR_RETURN(auto layered, snapshot::LayeredDisk::Create(chain, NewOverlayPath(slot)));
    d.layered = layered.get();
    backend = std::make_unique<LayeredBackend>(std::move(layered));
  } else {
    ASSIGN_OR_RETURN(backend, virtio::RawFileBackend::Open(disk.path, disk.read_only));
  }
  auto block = std::make_unique<virtio::Block>(std::move(backend), "disk" + std::to_string(slot));
  RETURN_IF_ERROR(AttachVirtio(std::move(block)));
  disks_.push_back(std::move(d));
  return Status::Ok();
}

// DeviceResources::open_disk of a restore or fork child (the block device
// then attaches in the next virtio slot).
Result<std::unique_ptr<virtio::BlockBackend>> Vm::OpenRestoredDisk(const virtio::BlockState& b) {
  if (b.serial == virtio::kWorkspaceSerial && b.chain.base_path.empty() && !b.read_only)
    return RestoredWorkspaceSlot();
  const auto slot = static_cast<uint32_t>(virtio_.size());
  DiskSlot d{slot, nullptr, b.chain.base_path, b.read_only};
  std::unique_ptr<virtio::BlockBackend> backend;
  if (b.read_only) {
    ASSIGN_OR_RETURN(auto raw, virtio::RawFileBackend::Open(b.chain.base_path, true));
    if (raw->size() != b.chain.size)
      return Status::FailedPrecondition("disk image " + b.chain.base_path +
                                        " changed size since the snapshot");
    backend = std::move(raw);
  } else {
    if (config_.layer_dir.empty())
      return Status::InvalidArgument("the snapshot has a writable disk: a layer directory "
                                     "(--layer-dir, or \"layer_dir\") is required for its overlay");
    ASSIGN_OR_RETURN(auto layered, snapshot::LayeredDisk::Create(b.chain, NewOverlayPath(slot)));
    d.layered = layered.get();
    backend = std::make_unique<LayeredBackend>(std::move(layered));
  }
  disks_.push_back(std::move(d));
  return backend;
}

Status Vm::CheckDisksCapturable() const {
  for (const DiskSlot& d : disks_) {
    if (!d.read_only && d.layered == nullptr)
      return Status::Unimplemented(
          "disk " + std::to_string(d.slot) + " (" + d.base_path +
          ") is a raw image written in place: start the VM with --layer-dir to snapshot or fork "
          "it (copy-on-write layers)");
  }
  return Status::Ok();
}

Status Vm::FreezeDisks() {
  RETURN_IF_ERROR(CheckDisksCapturable());
  for (DiskSlot& d : disks_) {
    if (d.layered == nullptr) continue;  // a read-only image: recorded as it is
    // The guest is paused and this is the device thread: every completed
    // write is in the overlay, and Freeze syncs it before sealing.
    if (d.layered->chain().layers.size() >= snapshot::LayeredDisk::kMaxLayers) {
      // Only if background flattens fell behind: wait for one, or do one now.
      JoinFlatten();
      if (d.layered->chain().layers.size() >= snapshot::LayeredDisk::kMaxLayers) {
        ASSIGN_OR_RETURN(auto merged, d.layered->Flatten(NewOverlayPath(d.slot)));
        (void)merged;
      }
    }
    ASSIGN_OR_RETURN(auto chain, d.layered->Freeze(NewOverlayPath(d.slot)));
    (void)chain;  // the block device saves it (Block::SaveState)
    MaybeFlatten(d);
  }
  return Status::Ok();
}

std::vector<snapshot::DiskIndexEntry> Vm::DiskIndex() const {
  std::vector<snapshot::DiskIndexEntry> out;
  for (const DiskSlot& d : disks_) {
    // Every DiskSlot's virtio slot holds the Block attached with it.
    const auto& block = static_cast<const virtio::Block&>(*virtio_.at(d.slot)->device());
    out.push_back({d.slot, block.id(), d.read_only,
                   block.backend()->SavedChain().value_or(snapshot::DiskChain{})});
  }
  return out;
}

void Vm::MaybeFlatten(DiskSlot& d) {
  if (!d.layered->NeedsFlatten()) return;
  if (flatten_thread_.joinable()) {
    if (!flatten_done_) return;  // one at a time; the next capture tries again
    JoinFlatten();
  }
  flatten_done_ = false;
  // The merged layer replaces the frozen ones under this VM only; the old
  // files stay (snapshots and fork children reference them by path and id).
  // The thread does not log: a fork(2) while it held the logger's lock would
  // leave that lock held forever in the child. JoinFlatten reports.
  flatten_thread_ = std::thread([this, disk = d.layered, out = NewOverlayPath(d.slot)] {
    Result<snapshot::LayerRef> merged = disk->Flatten(out);
    flatten_result_ = merged.ok() ? Status::Ok() : merged.status();
    flatten_out_ = out;
    flatten_done_ = true;
  });
}

void Vm::JoinFlatten() {
  if (!flatten_thread_.joinable()) return;
  flatten_thread_.join();
  if (flatten_result_.ok()) {
    log::Info("disk layers flattened", {{"vm", config_.vm_id}, {"layer", flatten_out_}});
  } else {
    log::Warn("disk flatten failed", {{"vm", config_.vm_id}, {"error", flatten_result_.ToString()}});
  }
}

void Vm::RemoveOverlays() {
  for (const DiskSlot& d : disks_) {
    if (d.layered == nullptr) continue;
    const std::string path = d.layered->overlay_path();
    if (::unlink(path.c_str()) != 0)
      log::Warn("disk overlay not removed", {{"vm", config_.vm_id}, {"path", path}});
  }
}

}  // namespace kubicle::vmm
