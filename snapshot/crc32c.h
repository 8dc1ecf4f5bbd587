// CRC-32C (Castagnoli): the checksum of every Kubicle snapshot file (state
// trailer, disk-layer headers and allocation maps).
//
// Why CRC-32C rather than Firecracker's CRC-64: x86-64 computes it in
// hardware (SSE4.2 `crc32`, ~8 bytes per cycle), so checking a state file on
// the restore path costs microseconds; it detects every burst error up to
// 32 bits and all the truncation/bit-rot corruption a snapshot meets. It is
// not a defence against a deliberate attacker (meta.json's SHA-256 is).
//
// Contract: standard CRC-32C (reflected polynomial 0x82F63B78, initial value
// and final XOR 0xFFFFFFFF); Crc32c("123456789") == 0xE3069283. The software
// and hardware paths give identical results; the hardware one is chosen at
// run time when the CPU has SSE4.2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kubicle::snapshot {

// CRC of data. To checksum pieces, pass the previous result as `crc`:
// Crc32c(b, Crc32c(a)) == Crc32c(a + b).
uint32_t Crc32c(std::span<const uint8_t> data, uint32_t crc = 0);

namespace internal {
// The two implementations, exposed so tests can compare them.
uint32_t Crc32cSoftware(std::span<const uint8_t> data, uint32_t crc);
uint32_t Crc32cHardware(std::span<const uint8_t> data, uint32_t crc);
bool HasHardwareCrc32c();
}  // namespace internal

}  // namespace kubicle::snapshot
