#include "common/constant_time.h"

#include <algorithm>
#include <cstddef>

namespace kubicle {

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  // Runs over the longer input and folds every difference into one byte.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace kubicle
