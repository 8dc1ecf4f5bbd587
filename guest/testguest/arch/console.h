// Serial console of the test guest: an 8250 UART at port 0x3f8, written by
// polling LSR.THRE (bit 5 of port 0x3fd) before each byte. Output only.
#pragma once

#include <stdint.h>

namespace kubicle::guest::testguest::arch {

void Print(const char* s);
void PrintN(const char* s, uint32_t n);
void PrintDec(uint64_t v);
void PrintHex(uint64_t v);  // "0x..." without leading zeros

}  // namespace kubicle::guest::testguest::arch
