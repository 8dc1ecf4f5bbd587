#include "snapshot/crc32c.h"

#include <array>
#include <cstring>

namespace kubicle::snapshot::internal {
namespace {

constexpr uint32_t kPoly = 0x82F63B78;  // reflected Castagnoli polynomial

// Slice-by-8 tables: table[k][b] is the CRC of byte b followed by k zeros.
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}
constexpr auto kTables = MakeTables();

}  // namespace

uint32_t Crc32cSoftware(std::span<const uint8_t> data, uint32_t crc) {
  uint32_t c = ~crc;
  const uint8_t* p = data.data();
  size_t n = data.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = kTables[7][w & 0xff] ^ kTables[6][(w >> 8) & 0xff] ^ kTables[5][(w >> 16) & 0xff] ^
        kTables[4][(w >> 24) & 0xff] ^ kTables[3][(w >> 32) & 0xff] ^
        kTables[2][(w >> 40) & 0xff] ^ kTables[1][(w >> 48) & 0xff] ^ kTables[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
  return ~c;
}

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(std::span<const uint8_t> data,
                                                           uint32_t crc) {
  uint64_t c = ~crc;
  const uint8_t* p = data.data();
  size_t n = data.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}

bool HasHardwareCrc32c() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

}  // namespace kubicle::snapshot::internal

namespace kubicle::snapshot {

uint32_t Crc32c(std::span<const uint8_t> data, uint32_t crc) {
  return internal::HasHardwareCrc32c() ? internal::Crc32cHardware(data, crc)
                                       : internal::Crc32cSoftware(data, crc);
}

}  // namespace kubicle::snapshot
