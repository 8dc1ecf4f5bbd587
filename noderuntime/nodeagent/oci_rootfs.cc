#include "noderuntime/nodeagent/oci_rootfs.h"

#include <algorithm>

#include "noderuntime/oci/rootfs_builder.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

class StorePuller final : public ImagePuller {
 public:
  explicit StorePuller(std::unique_ptr<oci::ImageStore> store) : store_(std::move(store)) {}
  Result<oci::PulledImage> Pull(const std::string& reference, const ProgressFn& progress) override {
    return store_->Pull(reference, progress);
  }
  Status CollectGarbage(const std::set<std::string>& keep) override { return store_->CollectGarbage(keep).status(); }

 private:
  std::unique_ptr<oci::ImageStore> store_;
};

}  // namespace

Result<std::shared_ptr<ImageRootfsCache>> OpenOciRootfsCache(oci::ImageStoreOptions store) {
  oci::RootfsLimits limits;
  // Layers compress text 3-5x; past 4x of what the node takes in a pull is
  // not an image but a bomb, or an image too big for this node.
  const uint64_t unpacked = store.max_image_bytes * 4;
  limits.max_total_bytes = unpacked;
  limits.max_file_bytes = std::min(limits.max_file_bytes, unpacked);
  const std::string rootfs_dir = store.dir + "/rootfs";
  ASSIGN_OR_RETURN(std::unique_ptr<oci::ImageStore> opened, oci::ImageStore::Open(std::move(store)));
  auto build = [limits](const oci::PulledImage& image, const std::string& out, const ProgressFn& progress) {
    return oci::BuildRootfs(image.layers, image.config, out, limits, progress).status();
  };
  return std::make_shared<ImageRootfsCache>(rootfs_dir, kImageRootfsFormat,
                                            std::make_unique<StorePuller>(std::move(opened)), build);
}

}  // namespace kubicle::noderuntime::nodeagent
