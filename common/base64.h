// Standard base64 (RFC 4648 with padding): bytes in JSON bodies, Secret
// data. The decoder is strict, so every byte string has one encoding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubicle {

std::string Base64Encode(std::span<const uint8_t> data);
inline std::string Base64Encode(std::string_view data) {
  return Base64Encode({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
}
// Padding required, no whitespace, padding bits zero; InvalidArgument
// naming the offset otherwise.
Result<std::vector<uint8_t>> Base64Decode(std::string_view text);

}  // namespace kubicle
