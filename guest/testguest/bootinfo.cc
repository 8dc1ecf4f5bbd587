#include "guest/testguest/bootinfo.h"

#include "guest/protocol/wire.h"
#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest {

namespace wire = ::kubicle::guest::protocol;

bool ParseNumber(const char* s, uint32_t len, uint32_t* pos, uint64_t* value) {
  uint32_t p = *pos;
  uint64_t base = 10;
  if (p + 1 < len && s[p] == '0' && (s[p + 1] == 'x' || s[p + 1] == 'X')) {
    base = 16;
    p += 2;
  }
  uint64_t v = 0;
  const uint32_t start = p;
  for (; p < len; ++p) {
    const char c = s[p];
    uint64_t d;
    if (c >= '0' && c <= '9') {
      d = uint64_t(c - '0');
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      d = uint64_t(c - 'a' + 10);
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      d = uint64_t(c - 'A' + 10);
    } else {
      break;
    }
    if (v > (~uint64_t{0} - d) / base) return false;
    v = v * base + d;
  }
  if (p == start) return false;
  *pos = p;
  *value = v;
  return true;
}

namespace {
constexpr char kKey[] = "virtio_mmio.device=";
constexpr uint32_t kKeyLen = sizeof(kKey) - 1;

bool ParseDevice(const char* s, uint32_t len, VirtioMmioDevice* d) {
  uint32_t p = 0;
  uint64_t size = 0, base = 0, irq = 0;
  if (!ParseNumber(s, len, &p, &size)) return false;
  if (p < len) {
    uint32_t shift = 0;
    switch (s[p]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: break;
    }
    if (shift != 0) {
      if (size > (~uint64_t{0} >> shift)) return false;
      size <<= shift;
      ++p;
    }
  }
  if (p >= len || s[p++] != '@') return false;
  if (!ParseNumber(s, len, &p, &base)) return false;
  if (p >= len || s[p++] != ':') return false;
  if (!ParseNumber(s, len, &p, &irq)) return false;
  if (p < len && s[p] == ':') {  // optional platform device id
    ++p;
    uint64_t id = 0;
    if (!ParseNumber(s, len, &p, &id)) return false;
  }
  if (p != len || size == 0 || irq == 0 || irq > 255 || base + size < base) return false;
  d->base = base;
  d->size = size;
  d->irq = uint32_t(irq);
  return true;
}
}  // namespace

uint32_t ParseVirtioMmioDevices(const char* cmdline, uint32_t len, VirtioMmioDevice* out,
                                uint32_t max) {
  uint32_t count = 0;
  uint32_t i = 0;
  while (i < len && count < max) {
    while (i < len && (cmdline[i] == ' ' || cmdline[i] == '\t' || cmdline[i] == '\n')) ++i;
    uint32_t end = i;
    while (end < len && cmdline[end] != ' ' && cmdline[end] != '\t' && cmdline[end] != '\n' &&
           cmdline[end] != '\0') {
      ++end;
    }
    const uint32_t word = end - i;
    if (word > kKeyLen && Equal(cmdline + i, kKey, kKeyLen)) {
      VirtioMmioDevice d;
      if (ParseDevice(cmdline + i + kKeyLen, word - kKeyLen, &d)) out[count++] = d;
    }
    if (end < len && cmdline[end] == '\0') break;
    i = end;
  }
  return count;
}

uint32_t ReadZeroPageE820(const uint8_t* zp, E820Entry* out, uint32_t max) {
  uint32_t n = zp[0x1e8];
  if (n > 128) n = 128;  // E820_MAX_ENTRIES_ZEROPAGE; the table has no room for more
  if (n > max) n = max;
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* e = zp + 0x2d0 + 20 * i;
    out[i].addr = wire::LoadLe64(e);
    out[i].size = wire::LoadLe64(e + 8);
    out[i].type = wire::LoadLe32(e + 16);
  }
  return n;
}

namespace {
bool ChecksumOk(const uint8_t* p, uint32_t len) {
  uint8_t sum = 0;
  for (uint32_t i = 0; i < len; ++i) sum = uint8_t(sum + p[i]);
  return sum == 0;
}

const uint8_t* FindFloating(PhysReader read, uint64_t from, uint64_t to) {
  const uint8_t* area = read(from, uint32_t(to - from));
  if (area == nullptr) return nullptr;
  for (uint64_t off = 0; off + 16 <= to - from; off += 16) {
    const uint8_t* f = area + off;
    if (f[0] == '_' && f[1] == 'M' && f[2] == 'P' && f[3] == '_' && f[8] == 1 &&
        ChecksumOk(f, 16)) {
      return f;
    }
  }
  return nullptr;
}
}  // namespace

bool ParseMpTable(PhysReader read, MpInfo* out) {
  const uint8_t* fp = FindFloating(read, 0x9fc00, 0xa0000);
  if (fp == nullptr) fp = FindFloating(read, 0xf0000, 0x100000);
  if (fp == nullptr) {
    out->error = "no MP floating pointer";
    return false;
  }
  const uint32_t table = wire::LoadLe32(fp + 4);
  const uint8_t* hdr = read(table, 44);
  if (table == 0 || hdr == nullptr || !Equal(hdr, "PCMP", 4)) {
    out->error = "MP configuration table missing";
    return false;
  }
  const uint16_t length = wire::LoadLe16(hdr + 4);
  const uint8_t* t = length >= 44 ? read(table, length) : nullptr;
  if (t == nullptr || !ChecksumOk(t, length)) {
    out->error = "MP configuration table has a bad length or checksum";
    return false;
  }
  out->lapic_address = wire::LoadLe32(t + 36);
  // Walk entries by the table length, as Linux does: some firmware (qboot)
  // leaves the entry count at 0.
  uint32_t off = 44;
  while (off < length) {
    const uint8_t type = t[off];
    const uint32_t size = type == 0 ? 20 : 8;
    if (type > 4 || off + size > length) {
      out->error = "MP configuration table has a bad entry";
      return false;
    }
    if (type == 0 && (t[off + 3] & 1) != 0 && out->cpu_count < MpInfo::kMaxCpus) {
      out->apic_ids[out->cpu_count++] = t[off + 1];
      if ((t[off + 3] & 2) != 0) out->bsp_apic_id = t[off + 1];
    }
    off += size;
  }
  if (out->cpu_count == 0) {
    out->error = "MP table lists no processor";
    return false;
  }
  return true;
}

}  // namespace kubicle::guest::testguest
