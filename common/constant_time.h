// Comparison of secrets (tokens, token hashes) in time that depends on the
// lengths only, never on where the first differing byte is.
#pragma once

#include <string_view>

namespace kubicle {

bool ConstantTimeEqual(std::string_view a, std::string_view b);

}  // namespace kubicle
