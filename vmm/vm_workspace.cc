// The workspace slot of Vm (docs/workspaces.md): a virtio-blk device that a
// template is baked with, empty (capacity 0), whose backend a restore
// request replaces with a workspace's raw ext4 image. A snapshot's device
// set is fixed, so the slot must exist before the template's snapshot; its
// saved state never names a workspace (the next restore names its own), so
// a template stays shareable and a snapshot of a VM holding a workspace
// does not copy it.
#include "common/log.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/block_backend.h"
#include "vmm/vm.h"

namespace kubicle::vmm {

namespace virtio = devices::virtio;

namespace {

// The empty slot: no sector exists (the device refuses every range
// before the backend is asked).
class EmptySlot final : public virtio::BlockBackend {
 public:
  uint64_t size() const override { return 0; }
  bool read_only() const override { return false; }
  Status ReadV(uint64_t, std::span<const iovec>) override {
    return Status::OutOfRange("the workspace slot is empty");
  }
  Status WriteV(uint64_t, std::span<const iovec>) override {
    return Status::OutOfRange("the workspace slot is empty");
  }
  Status Flush() override { return Status::Ok(); }
  std::optional<snapshot::DiskChain> SavedChain() const override { return snapshot::DiskChain{}; }
};

// A workspace image, written in place; saved as the empty slot.
class WorkspaceImage final : public virtio::BlockBackend {
 public:
  explicit WorkspaceImage(std::unique_ptr<virtio::RawFileBackend> raw) : raw_(std::move(raw)) {}
  uint64_t size() const override { return raw_->size(); }
  bool read_only() const override { return false; }
  Status ReadV(uint64_t offset, std::span<const iovec> iov) override { return raw_->ReadV(offset, iov); }
  Status WriteV(uint64_t offset, std::span<const iovec> iov) override {
    return raw_->WriteV(offset, iov);
  }
  Status Flush() override { return raw_->Flush(); }
  std::optional<snapshot::DiskChain> SavedChain() const override { return snapshot::DiskChain{}; }

 private:
  std::unique_ptr<virtio::RawFileBackend> raw_;
};

}  // namespace

Status Vm::AttachWorkspaceSlot() {
  workspace_slot_ = static_cast<uint32_t>(virtio_.size());
  return AttachVirtio(std::make_unique<virtio::Block>(std::make_unique<EmptySlot>(),
                                                      virtio::kWorkspaceSerial));
}

std::unique_ptr<virtio::BlockBackend> Vm::RestoredWorkspaceSlot() {
  workspace_slot_ = static_cast<uint32_t>(virtio_.size());
  return std::make_unique<EmptySlot>();
}

Result<std::unique_ptr<virtio::BlockBackend>> Vm::OpenWorkspace(const std::string& path) const {
  ASSIGN_OR_RETURN(auto raw, virtio::RawFileBackend::Open(path, /*read_only=*/false));
  if (raw->size() < (1u << 20) || raw->size() % virtio::Block::kSectorSize != 0)
    return Status::InvalidArgument("workspace image " + path +
                                   " must be at least 1 MiB and a whole number of sectors");
  return std::unique_ptr<virtio::BlockBackend>(std::make_unique<WorkspaceImage>(std::move(raw)));
}

Status Vm::PlugWorkspace(std::unique_ptr<virtio::BlockBackend> backend) {
  if (!workspace_slot_)
    return Status::FailedPrecondition(
        "the snapshot has no workspace slot (bake its template with --workspace-slot)");
  auto& block = static_cast<virtio::Block&>(*virtio_.at(*workspace_slot_)->device());
  const uint64_t bytes = backend->size();
  RETURN_IF_ERROR(block.ReplaceBackend(std::move(backend)));
  workspace_plugged_ = true;
  log::Info("workspace attached", {{"vm", config_.vm_id}, {"bytes", bytes}});
  return Status::Ok();
}

}  // namespace kubicle::vmm
