// ImageReference: an OCI image reference ("host[:port]/path[:tag][@digest]")
// parsed by the distribution reference grammar, so nothing that reaches the
// registry client was not checked first.
//
// Contracts:
// - The registry host is always named: a first component with no '.' or ':'
//   that is not "localhost" is refused (InvalidArgument), never completed to
//   some default registry; Kubicle writes no registry address into its code.
// - Path components are lowercase alphanumerics joined by '.', '_', '__' or
//   runs of '-'; the name (host and path) is at most 255 characters.
// - A tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}; a digest is
//   "sha256:<64 lowercase hex>" (other algorithms are refused).
// - Neither tag nor digest: the tag is "latest", as docker and kubelet do.
//   Both: the digest is what is pulled; the tag is kept for display.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kubicle::noderuntime::oci {

struct ImageReference {
  std::string registry;    // "reg.example:5000", "localhost", "127.0.0.1:5000"
  std::string repository;  // "team/agent-python"
  std::string tag;         // "3.12"; empty only when a digest is given alone
  std::string digest;      // "sha256:<hex>" or empty
  // "registry/repository[:tag][@digest]"; parses back to the same value.
  std::string ToString() const;
  // What a manifest GET names: the digest if any, else the tag.
  const std::string& ManifestRef() const { return digest.empty() ? tag : digest; }
  bool operator==(const ImageReference&) const = default;
};

[[nodiscard]] Result<ImageReference> ParseImageReference(std::string_view text);

// True for "sha256:" followed by 64 lowercase hex digits.
bool IsSha256Digest(std::string_view digest);

}  // namespace kubicle::noderuntime::oci
