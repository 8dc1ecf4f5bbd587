// SHA-256 (OpenSSL EVP) for meta.json's file digests, and the chunked digest
// used for guest memory files.
//
// Why a chunked digest for memory: a memory file is mostly holes (untouched
// guest pages). A plain SHA-256 would have to hash every zero byte of a 2 GiB
// file (~1.5 s here); the chunked form hashes 1 MiB chunks separately and
// uses a precomputed leaf for all-zero chunks, so its cost follows the data
// the guest actually touched. Definition (docs/snapshot-format.md):
//   leaf_i = SHA-256(bytes [i MiB, (i+1) MiB) of the file; last may be short)
//   digest = SHA-256(leaf_0 || leaf_1 || ...)
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/sha256.h"
#include "common/status.h"

namespace kubicle::snapshot {

using ::kubicle::Sha256;
using ::kubicle::Sha256Digest;
using ::kubicle::Sha256Of;
inline constexpr uint64_t kDigestChunkBytes = 1ull << 20;

// Incremental chunked digest. Feed chunks in file order; each but the last
// must be kDigestChunkBytes long.
class ChunkedDigest {
 public:
  void AddChunk(std::span<const uint8_t> chunk) { AddLeaf(Sha256Of(chunk)); }
  // A chunk hashed by the caller (SHA-256 of its bytes).
  void AddLeaf(const Sha256Digest& leaf) { outer_.Update(leaf); }
  // A chunk of `size` zero bytes, without hashing them (cached leaf).
  void AddZeroChunk(uint64_t size);
  std::string FinalHex() { return outer_.FinalHex(); }

 private:
  Sha256 outer_;
};

// Plain SHA-256 of a whole file (reads it from offset 0).
Result<std::string> Sha256FileHex(int fd);
// The chunked digest of a file; holes (SEEK_HOLE) count as zero chunks
// without being read.
Result<std::string> ChunkedDigestOfFile(int fd);

}  // namespace kubicle::snapshot
