// Manifest parsing: the JSON a registry returns for a manifest GET (an OCI
// image index or manifest, a Docker v2 manifest list or manifest) and an
// image's config blob, read into typed descriptors. Pure functions; the
// bodies come from the network and are hostile.
//
// Contracts:
// - Callers bound the body's size before parsing (registry_client caps it
//   at kMaxManifestBytes); parsing never throws and refuses malformed JSON,
//   a missing or unknown mediaType, a descriptor whose digest is not
//   sha256:<64 hex> or whose size is negative or not an integer, and more
//   than kMaxLayers layers or kMaxIndexEntries index entries.
// - An index's platform is chosen by ChoosePlatform: the first entry with
//   os "linux" and architecture "amd64" (variant ignored); none is
//   NotFound naming the platforms the index has.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "noderuntime/oci/image.h"

namespace kubicle::noderuntime::oci {

inline constexpr uint64_t kMaxManifestBytes = 4 << 20;
inline constexpr uint64_t kMaxConfigBytes = 4 << 20;
inline constexpr size_t kMaxLayers = 256;
inline constexpr size_t kMaxIndexEntries = 1024;

inline constexpr std::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kDockerList =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view kDockerManifest =
    "application/vnd.docker.distribution.manifest.v2+json";
// The Accept header of a manifest GET: every kind above.
std::string ManifestAccept();

struct Descriptor {
  std::string media_type;
  std::string digest;  // sha256:<hex>
  uint64_t size = 0;
  std::string os, architecture;  // index entries only
};

// A manifest GET's body: either an index (entries) or an image manifest
// (config + layers).
struct ParsedManifest {
  bool is_index = false;
  std::vector<Descriptor> entries;  // index: one per platform
  Descriptor config;                // manifest
  std::vector<Descriptor> layers;   // manifest, bottom first
};

// `content_type` is the response's Content-Type (may be empty: the body's
// own mediaType decides then; when both are present they must agree).
[[nodiscard]] Result<ParsedManifest> ParseManifest(std::string_view body,
                                                   std::string_view content_type);

[[nodiscard]] Result<Descriptor> ChoosePlatform(const ParsedManifest& index,
                                                std::string_view os = "linux",
                                                std::string_view architecture = "amd64");

// The config blob: Env, Entrypoint, Cmd, WorkingDir, User from "config";
// other fields are ignored. Strings over 64 KiB or more than 4096 entries in
// a list are refused.
[[nodiscard]] Result<ImageConfig> ParseImageConfig(std::string_view body);

}  // namespace kubicle::noderuntime::oci
