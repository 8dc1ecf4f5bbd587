// Tiny freestanding helpers for the test guest's portable code. Everything in
// guest/testguest/*.{h,cc} (not arch/) compiles both for the freestanding
// guest (no libc: arch/runtime.cc provides memcpy/memset/memmove/memcmp) and
// for the host, where the unit tests run it.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kubicle::guest::testguest {

// n == 0 is allowed with null pointers (an absent field has no data).
inline void Copy(void* dst, const void* src, size_t n) {
  if (n != 0) __builtin_memcpy(dst, src, n);
}
inline void Move(void* dst, const void* src, size_t n) {
  if (n != 0) __builtin_memmove(dst, src, n);
}
inline void Zero(void* dst, size_t n) { __builtin_memset(dst, 0, n); }
inline bool Equal(const void* a, const void* b, size_t n) { return __builtin_memcmp(a, b, n) == 0; }

inline size_t CStrLen(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

template <typename T>
constexpr T Min(T a, T b) {
  return a < b ? a : b;
}

}  // namespace kubicle::guest::testguest
