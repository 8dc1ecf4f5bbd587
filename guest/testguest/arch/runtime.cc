// The few libc/ABI symbols freestanding C++ still needs. String operations
// use the REP instructions: one (emulated) instruction instead of a loop.
#include <stddef.h>
#include <stdint.h>

#include "guest/testguest/arch/cpu.h"

extern "C" {

void* memcpy(void* dst, const void* src, size_t n) {
  void* d = dst;
  asm volatile("rep movsb" : "+D"(d), "+S"(src), "+c"(n) : : "memory");
  return dst;
}

void* memmove(void* dst, const void* src, size_t n) {
  if (dst <= src || static_cast<const uint8_t*>(src) + n <= static_cast<uint8_t*>(dst)) {
    return memcpy(dst, src, n);
  }
  // Overlapping with dst above src: copy backwards.
  uint8_t* d = static_cast<uint8_t*>(dst) + n - 1;
  const uint8_t* s = static_cast<const uint8_t*>(src) + n - 1;
  asm volatile("std; rep movsb; cld" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
  return dst;
}

void* memset(void* dst, int c, size_t n) {
  void* d = dst;
  asm volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
  return dst;
}

int memcmp(const void* a, const void* b, size_t n) {
  const uint8_t* x = static_cast<const uint8_t*>(a);
  const uint8_t* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  }
  return 0;
}

[[noreturn]] void __cxa_pure_virtual() { kubicle::guest::testguest::arch::HaltForever(); }

}  // extern "C"
