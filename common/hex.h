// Lower-case hex, the one spelling of digests, tokens and ids in the tree.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kubicle {

std::string HexEncode(std::span<const uint8_t> bytes);
inline std::string HexEncode(std::string_view bytes) {
  return HexEncode({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}
// Fills `out` from exactly 2 * out.size() lower-case hex digits; false (and
// `out` unspecified) for any other length or character.
bool HexDecode(std::string_view hex, std::span<uint8_t> out);

}  // namespace kubicle
