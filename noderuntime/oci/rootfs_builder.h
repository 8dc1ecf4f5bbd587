// BuildRootfs: the verified layers of a pulled image to one ext4 image file,
// the read-only root a Kubicle guest boots (docs/images.md, "From layers to
// a root file system").
//
// How: two passes over the layers, never a host directory.
//  1. Each layer is streamed (LayerStream: gzip or zstd decoded on the fly, digest
//     re-checked at its end, bombs refused while inflating) through
//     TarReader into a RootfsTree: metadata only, the OCI layer rules
//     applied (rootfs_tree.h lists them and every refusal). Then the guest's
//     mount points and /.kubicle/image.json are added.
//  2. The image is made (mke2fs on a sparse file sized to the tree) and the
//     tree written with libext2fs (RootfsImage); then each layer that still
//     holds a file of the result is streamed again and those files' bytes
//     written. A layer whose bytes changed between the passes (an entry's
//     size differs) is DataLoss.
//
// Why in the node's process and not a confined helper like kubicle-ext4:
// the only parser of hostile bytes is TarReader (bounded, fuzzed:
// fuzz/noderuntime/tar_reader_fuzzer.cc), zlib and libzstd; nothing hostile is
// handed to libext2fs, which only writes an image this call made; and no
// host path is created from an image name. Names under a symlink of the
// image are refused, not resolved (rootfs_tree.h says why).
//
// Contracts:
//  - `out_path` must not exist; it is created, and removed again on any
//    error. Errors name the layer ("layer 2 of 5 (sha256:...)") and, for a
//    refused entry, the entry's path.
//  - Limits are applied before the bytes they limit are read: a file's
//    size, the running total of file bytes (every layer's files, replaced or
//    not: it bounds the work), the entry count (whiteouts included), path
//    length, the inflate ratio.
//  - /proc /sys /dev /tmp /run are created when the image lacks them (tmp
//    mode 1777), as docs/guest.md's "Bringing your own root filesystem"
//    requires; /.kubicle is the builder's (an image's own is replaced).
//  - progress, when set, is called about once a second, from this thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "noderuntime/oci/image.h"

namespace kubicle::noderuntime::oci {

struct RootfsLimits {
  uint64_t max_file_bytes = 4ull << 30;
  uint64_t max_total_bytes = 16ull << 30;
  uint64_t max_entries = 1'000'000;
  uint64_t max_path_bytes = 4096;
  double max_expansion_ratio = 200;  // uncompressed/compressed per layer: a decompression bomb
  // The ratio applies past this many uncompressed bytes of a layer (a
  // 100-byte layer's tar padding alone inflates 100x).
  uint64_t expansion_allowance_bytes = 1 << 20;
  // The mke2fs binary (found on PATH unless a path).
  std::string mke2fs = "mke2fs";
};

struct RootfsInfo {
  std::string path;
  uint64_t image_bytes = 0;  // the image file's size (sparse: fewer on disk)
  uint64_t file_bytes = 0;   // regular files' bytes in the result
  uint64_t entries = 0;      // distinct inodes in the result
};

using RootfsProgressFn =
    std::function<void(const std::string& message)>;  // "unpacking layer 2 of 5: 40 MiB"

// Writes out_path (created; removed again on any error) as an ext4 image
// holding the layers applied bottom first, plus /.kubicle/image.json (the
// ImageConfig as OCI config JSON: Env, Entrypoint, Cmd, WorkingDir, User),
// sized to the content plus headroom (ext4 free space for the overlay's
// needs is not required: the guest mounts it read-only under an overlay).
Result<RootfsInfo> BuildRootfs(const std::vector<LayerBlob>& layers, const ImageConfig& config,
                               const std::string& out_path, const RootfsLimits& limits,
                               const RootfsProgressFn& progress);

// /.kubicle/image.json's content for `config`.
std::string ImageConfigJson(const ImageConfig& config);

}  // namespace kubicle::noderuntime::oci
