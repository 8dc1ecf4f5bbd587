// Sha256: freestanding SHA-256 (FIPS 180-4) for the test guest's built-in
// `sha256sum`, so host tests can check file contents inside the guest.
// Integer-only (the guest is built with -mgeneral-regs-only); no allocation.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kubicle::guest::testguest {

class Sha256 {
 public:
  static constexpr size_t kDigestBytes = 32;
  void Update(const uint8_t* data, size_t n);
  void Final(uint8_t out[kDigestBytes]);

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t buf_[64] = {};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

}  // namespace kubicle::guest::testguest
