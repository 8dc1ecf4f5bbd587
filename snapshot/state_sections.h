// Encoders and decoders of the individual sections of the `state` file.
// Internal to snapshot/ (state_file.cc assembles them; see state.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "snapshot/byte_io.h"
#include "snapshot/state.h"

namespace kubicle::snapshot::internal {

enum SectionType : uint32_t {
  kSectionMachineConfig = 1,
  kSectionVm = 2,
  kSectionVcpu = 3,
  kSectionSerial = 4,
  kSectionVirtioDevice = 5,
};
inline constexpr uint32_t kSectionRequired = 1u << 0;
const char* SectionName(uint32_t type);

void EncodeMachineConfig(const MachineConfig& c, ByteWriter& w);
void EncodeVm(const VmState& v, ByteWriter& w);
void EncodeVcpu(const VcpuState& v, ByteWriter& w);
// The serial payload is the serial device's record as it encoded it.
void EncodeSerial(const std::vector<uint8_t>& s, ByteWriter& w);
// kind, slot, then the device's record.
void EncodeVirtioDevice(const VirtioDeviceState& d, ByteWriter& w);

// Each reads one section's fields; errors are left in r.status().
void DecodeMachineConfig(ByteReader& r, const DecodeLimits& l, MachineConfig* c);
void DecodeVm(ByteReader& r, VmState* v);
void DecodeVcpu(ByteReader& r, const DecodeLimits& l, VcpuState* v);
// Records are read whole (the rest of the section); the device that decodes
// them checks their end (ByteReader::End).
void DecodeSerial(ByteReader& r, std::vector<uint8_t>* s);
void DecodeVirtioDevice(ByteReader& r, VirtioDeviceState* d);

}  // namespace kubicle::snapshot::internal
