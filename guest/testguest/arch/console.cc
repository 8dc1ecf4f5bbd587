#include "guest/testguest/arch/console.h"

#include "guest/testguest/arch/cpu.h"

namespace kubicle::guest::testguest::arch {

namespace {
constexpr uint16_t kCom1 = 0x3f8;
constexpr uint16_t kFcr = kCom1 + 2;
constexpr uint16_t kLsr = kCom1 + 5;
constexpr uint8_t kLsrThre = 1 << 5;
constexpr uint32_t kFifoDepth = 16;  // 16550A

// Every port access is a VM exit (tens of microseconds here), so the console
// enables the FIFO and checks LSR.THRE (FIFO empty) once per 16 bytes
// instead of once per byte.
bool g_fifo_on = false;
uint32_t g_fifo_room = 0;

void PutChar(char c) {
  if (!g_fifo_on) {
    Outb(kFcr, 0x07);  // enable and clear the FIFOs
    g_fifo_on = true;
  }
  if (g_fifo_room == 0) {
    // Bounded wait: a UART that never reports THRE must not hang the guest.
    for (int i = 0; i < 100000 && (Inb(kLsr) & kLsrThre) == 0; ++i) Pause();
    g_fifo_room = kFifoDepth;
  }
  Outb(kCom1, uint8_t(c));
  --g_fifo_room;
}
}  // namespace

void PrintN(const char* s, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) PutChar(s[i]);
}

void Print(const char* s) {
  while (*s != '\0') PutChar(*s++);
}

void PrintDec(uint64_t v) {
  char buf[21];
  int i = 20;
  buf[i] = '\0';
  do {
    buf[--i] = char('0' + v % 10);
    v /= 10;
  } while (v != 0);
  Print(buf + i);
}

void PrintHex(uint64_t v) {
  char buf[19];
  int i = 18;
  buf[i] = '\0';
  do {
    const uint32_t d = uint32_t(v & 0xf);
    buf[--i] = char(d < 10 ? '0' + d : 'a' + d - 10);
    v >>= 4;
  } while (v != 0);
  buf[--i] = 'x';
  buf[--i] = '0';
  Print(buf + i);
}

}  // namespace kubicle::guest::testguest::arch
