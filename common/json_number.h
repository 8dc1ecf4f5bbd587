// Integer reads of JSON that came from outside the process (files on disk,
// the wire). nlohmann's get<T>() converts a float or an out-of-range integer
// with a plain cast, which is undefined for floats (1e300 -> uint64_t) and
// silently truncates integers; these throw nlohmann's own type_error instead,
// so callers that already turn json::exception into a Status stay correct.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace kubicle {

// `v` as T when it is a JSON integer (never a float or a string) within T's
// range; throws nlohmann::json::type_error otherwise.
template <typename T>
T IntegerFromJson(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  auto out_of_range = [&]() {
    return nlohmann::json::type_error::create(
        302, "expected an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                 std::to_string(std::numeric_limits<T>::max()) + "], got " + v.dump(),
        nullptr);
  };
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) throw out_of_range();
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {  // a negative number: nlohmann stores it signed
    const int64_t s = v.get<int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      throw out_of_range();
    } else {
      if (s < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          s > static_cast<int64_t>(std::numeric_limits<T>::max()))
        throw out_of_range();
      return static_cast<T>(s);
    }
  }
  throw out_of_range();
}

}  // namespace kubicle
