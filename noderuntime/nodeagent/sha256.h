// Streaming SHA-256 for the image resolver: downloads are hashed chunk by
// chunk as they arrive, local images are hashed without reading them whole
// into memory. Internal to kubicle_nodeagent_images.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace kubicle::noderuntime::nodeagent {

// Not thread-safe; one instance per stream.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t n);
  // Lowercase hex of everything passed to Update. Call once.
  std::string HexDigest();

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

// Lowercase hex SHA-256 of the file at `path`, read in 1 MiB chunks.
Result<std::string> Sha256OfFile(const std::string& path);

// True for exactly 64 lowercase hex digits (the CRD's *Sha256 pattern).
bool IsSha256Hex(const std::string& s);

}  // namespace kubicle::noderuntime::nodeagent
