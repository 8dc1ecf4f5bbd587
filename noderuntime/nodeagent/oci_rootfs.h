// The node's ImageRootfsCache over the real registry and rootfs sides:
// oci::ImageStore pulls (layers verified, kept by digest) and
// oci::BuildRootfs writes the ext4 image (docs/images.md). kubicle-node
// opens one when it joins a cluster; tests use ImageRootfsCache with fakes.
//
// Layout of `store.dir` (kubicle-node serve --image-store): ImageStore's
// blobs/, manifests/ and partial/, and rootfs/ (ImageRootfsCache).
#pragma once

#include <memory>

#include "common/status.h"
#include "noderuntime/nodeagent/image_rootfs_cache.h"
#include "noderuntime/oci/image_store.h"

namespace kubicle::noderuntime::nodeagent {

// The layout of what BuildRootfs writes (with /.kubicle/image.json, which
// the guest agent reads): bumped when it changes, so images are built anew
// rather than booted in an older layout.
inline constexpr int kImageRootfsFormat = 1;

// Opens the store (reads the registry config, checks the CA file: errors
// name them). Built root filesystems are bounded like the layers: a file or
// all files together at most 4 x store.max_image_bytes unpacked.
[[nodiscard]] Result<std::shared_ptr<ImageRootfsCache>> OpenOciRootfsCache(oci::ImageStoreOptions store);

}  // namespace kubicle::noderuntime::nodeagent
