// DiskChain: how a snapshot (or a running VM) names the read-only parts of a
// copy-on-write disk: a raw base image plus frozen layers, bottom first. The
// writable overlay on top is private to one VM and never part of a chain.
//
// Contract: each layer file's header records its own id and its parent's id
// (all zero for "directly on the base"); LayeredDisk::Open checks that the
// ids here match the files and that the parent links form exactly this
// chain, so a reference can never silently resolve to a different file.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kubicle::snapshot {

using LayerId = std::array<uint8_t, 16>;

struct LayerRef {
  std::string path;  // absolute path of a frozen layer file
  LayerId id{};
  bool operator==(const LayerRef&) const = default;
};

struct DiskChain {
  std::string base_path;  // raw image, opened read-only, never written
  uint64_t size = 0;      // guest-visible bytes (== the base image's size)
  std::vector<LayerRef> layers;
  bool operator==(const DiskChain&) const = default;
};

// Lower-case hex of an id, for logs and meta.json.
std::string LayerIdHex(const LayerId& id);

}  // namespace kubicle::snapshot
