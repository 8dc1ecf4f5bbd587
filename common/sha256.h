// SHA-256 (OpenSSL EVP) and the comparisons that go with secrets: one
// implementation for snapshot digests, image checks, token hashes. Library
// kubicle_crypto (links OpenSSL::Crypto).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/constant_time.h"  // secrets are compared with it
#include "common/status.h"

namespace kubicle {

using Sha256Digest = std::array<uint8_t, 32>;

// Streaming; not thread-safe, one instance per stream.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::span<const uint8_t> data);
  void Update(std::string_view data) {
    Update({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
  }
  // The digest of everything passed to Update; the hasher starts over.
  Sha256Digest Final();
  std::string FinalHex();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

Sha256Digest Sha256Of(std::span<const uint8_t> data);
// Lower-case hex of SHA-256(data).
std::string Sha256Hex(std::string_view data);
// Lower-case hex SHA-256 of the file at `path`, read in 1 MiB pieces.
Result<std::string> Sha256FileHex(const std::string& path);
// True for exactly 64 lower-case hex digits.
bool IsSha256Hex(std::string_view s);

}  // namespace kubicle
