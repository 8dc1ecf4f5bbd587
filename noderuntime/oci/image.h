// The types an OCI image is handed over in, between the registry side
// (ImageStore: pull, verify, keep layers by digest) and the rootfs side
// (BuildRootfs: layers to an ext4 image). Plain data, no behaviour.
//
// Contracts:
// - Digests are "sha256:<64 lowercase hex>"; a LayerBlob's file holds exactly
//   the bytes whose digest is `digest` (ImageStore verified them).
// - ImageConfig is what the image's config blob says (OCI image-spec
//   "config" object), already bounded by the store's limits; empty fields
//   mean the image left them unset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kubicle::noderuntime::oci {

// The parts of an image config a Sandbox's processes inherit.
struct ImageConfig {
  std::vector<std::string> env;         // "KEY=value"
  std::vector<std::string> entrypoint;  // Entrypoint
  std::vector<std::string> cmd;         // Cmd
  std::string working_dir;              // WorkingDir, absolute or empty
  std::string user;                     // User: "name", "uid", "uid:gid", ...
  bool operator==(const ImageConfig&) const = default;
};

// One layer, stored and verified.
struct LayerBlob {
  std::string digest;      // compressed blob digest, "sha256:..."
  std::string media_type;  // e.g. application/vnd.oci.image.layer.v1.tar+gzip
  uint64_t size = 0;       // compressed bytes
  std::string path;        // the verified blob on local disk
  bool operator==(const LayerBlob&) const = default;
};

// A pulled image: what a reference resolved to on one platform.
struct PulledImage {
  std::string reference;        // as asked, e.g. "reg.example:5000/team/py:3.12"
  std::string manifest_digest;  // the platform manifest's digest
  ImageConfig config;
  std::vector<LayerBlob> layers;  // bottom first
  uint64_t total_bytes = 0;       // sum of layer sizes
};

}  // namespace kubicle::noderuntime::oci
