// The `state` file container: header, section table, sections, trailer.
// Layout and rules: docs/snapshot-format.md.
#include <elf.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "snapshot/crc32c.h"
#include "snapshot/state.h"
#include "snapshot/state_sections.h"

namespace kubicle::snapshot {
namespace {

using internal::ByteReader;
using internal::ByteWriter;

constexpr char kMagic[8] = {'K', 'B', 'L', 'S', 'T', 'A', 'T', 'E'};
constexpr char kEndMarker[4] = {'K', 'E', 'N', 'D'};
constexpr uint32_t kHeaderSize = 64;
constexpr uint32_t kSectionEntrySize = 24;
constexpr uint32_t kTrailerSize = 8;
constexpr uint32_t kArchX86_64 = EM_X86_64;  // 62

struct Header {
  uint16_t major = 0;
  uint16_t minor = 0;
  uint32_t header_size = 0;
  uint32_t arch = 0;
  uint32_t section_count = 0;
  uint64_t file_size = 0;
  uint64_t table_offset = 0;
};

struct SectionEntry {
  uint32_t type = 0;
  uint32_t flags = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08" PRIx32, v);
  return buf;
}

template <typename T>
T Load(std::span<const uint8_t> b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

// Magic, version, architecture, declared size, checksum: everything that can
// be checked before trusting any offset in the file.
Result<Header> CheckEnvelope(std::span<const uint8_t> b, const DecodeLimits& limits) {
  if (b.size() > limits.max_file_bytes) {
    return Status::InvalidArgument("state file is " + std::to_string(b.size()) +
                                   " bytes, above the decode cap of " +
                                   std::to_string(limits.max_file_bytes));
  }
  if (b.size() < kHeaderSize + kTrailerSize) {
    return Status::DataLoss("state file truncated: " + std::to_string(b.size()) +
                            " bytes, smaller than its header and trailer (" +
                            std::to_string(kHeaderSize + kTrailerSize) + ")");
  }
  if (std::memcmp(b.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::InvalidArgument("not a Kubicle state file: bad magic (expected \"KBLSTATE\")");
  }
  Header h;
  h.major = Load<uint16_t>(b, 8);
  h.minor = Load<uint16_t>(b, 10);
  h.header_size = Load<uint32_t>(b, 12);
  h.arch = Load<uint32_t>(b, 16);
  h.section_count = Load<uint32_t>(b, 20);
  h.file_size = Load<uint64_t>(b, 24);
  h.table_offset = Load<uint64_t>(b, 32);
  std::string version = std::to_string(h.major) + "." + std::to_string(h.minor);
  if (h.major != kStateFormatMajor) {
    return Status::FailedPrecondition("state file format version " + version +
                                      " is not supported: this build reads major version " +
                                      std::to_string(kStateFormatMajor));
  }
  if (h.arch != kArchX86_64) {
    return Status::FailedPrecondition("state file is for ELF machine " + std::to_string(h.arch) +
                                      ", this host is x86-64 (62)");
  }
  if (h.file_size > b.size()) {
    return Status::DataLoss("state file truncated: header declares " +
                            std::to_string(h.file_size) + " bytes, only " +
                            std::to_string(b.size()) + " present");
  }
  if (h.file_size < b.size()) {
    return Status::DataLoss("state file has " + std::to_string(b.size() - h.file_size) +
                            " unexpected bytes after its declared end (" +
                            std::to_string(h.file_size) + ")");
  }
  size_t body = b.size() - kTrailerSize;
  if (std::memcmp(b.data() + body + 4, kEndMarker, sizeof(kEndMarker)) != 0) {
    return Status::DataLoss("state file trailer is damaged (end marker missing)");
  }
  uint32_t stored = Load<uint32_t>(b, body);
  uint32_t computed = Crc32c(b.first(body));
  if (stored != computed) {
    return Status::DataLoss("state file checksum mismatch: stored " + Hex32(stored) +
                            ", computed " + Hex32(computed) + " (the file is corrupted)");
  }
  return h;
}

Result<std::vector<SectionEntry>> ReadSectionTable(std::span<const uint8_t> b, const Header& h,
                                                   const DecodeLimits& limits) {
  uint64_t body_end = b.size() - kTrailerSize;
  if (h.header_size < kHeaderSize || h.header_size > body_end) {
    return Status::DataLoss("state header size " + std::to_string(h.header_size) +
                            " is out of bounds");
  }
  if (h.section_count > limits.max_sections) {
    return Status::InvalidArgument("state file has " + std::to_string(h.section_count) +
                                   " sections, above the cap of " +
                                   std::to_string(limits.max_sections));
  }
  uint64_t table_end = h.table_offset + uint64_t{h.section_count} * kSectionEntrySize;
  if (h.table_offset < h.header_size || h.table_offset > body_end || table_end > body_end) {
    return Status::DataLoss("state section table [" + std::to_string(h.table_offset) + ", " +
                            std::to_string(table_end) + ") lies outside the file");
  }
  std::vector<SectionEntry> table(h.section_count);
  for (uint32_t i = 0; i < h.section_count; ++i) {
    size_t at = h.table_offset + size_t{i} * kSectionEntrySize;
    SectionEntry& e = table[i];
    e.type = Load<uint32_t>(b, at);
    e.flags = Load<uint32_t>(b, at + 4);
    e.offset = Load<uint64_t>(b, at + 8);
    e.length = Load<uint64_t>(b, at + 16);
    if (e.offset < table_end || e.offset > body_end || e.length > body_end - e.offset) {
      return Status::DataLoss("state section " + std::to_string(i) + " (" +
                              internal::SectionName(e.type) + ") at offset " +
                              std::to_string(e.offset) + " length " + std::to_string(e.length) +
                              " is out of bounds (payload area ends at " +
                              std::to_string(body_end) + ")");
    }
  }
  return table;
}

// Decodes one known section into state. Unknown types are handled by the caller.
Status DecodeSection(const SectionEntry& e, uint32_t index, std::span<const uint8_t> payload,
                     bool newer_minor, const DecodeLimits& limits, MachineState* state,
                     int* config_count, int* vm_count) {
  ByteReader r(payload, "state section " + std::to_string(index) + " (" +
                            internal::SectionName(e.type) + ")");
  switch (e.type) {
    case internal::kSectionMachineConfig:
      ++*config_count;
      internal::DecodeMachineConfig(r, limits, &state->config);
      break;
    case internal::kSectionVm:
      ++*vm_count;
      internal::DecodeVm(r, &state->vm);
      break;
    case internal::kSectionVcpu:
      if (state->vcpus.size() >= limits.max_vcpus) {
        return Status::InvalidArgument("state file has more than " +
                                       std::to_string(limits.max_vcpus) + " vcpu sections");
      }
      internal::DecodeVcpu(r, limits, &state->vcpus.emplace_back());
      break;
    case internal::kSectionSerial:
      if (state->serial.has_value()) return Status::DataLoss("state file has two serial sections");
      internal::DecodeSerial(r, &state->serial.emplace());
      break;
    case internal::kSectionVirtioDevice:
      if (state->virtio.size() >= limits.max_devices) {
        return Status::InvalidArgument("state file has more than " +
                                       std::to_string(limits.max_devices) + " virtio devices");
      }
      internal::DecodeVirtioDevice(r, &state->virtio.emplace_back());
      break;
  }
  if (!r.ok()) return r.status();
  if (r.remaining() > 0 && !newer_minor) {
    return Status::DataLoss("state section " + std::to_string(index) + " (" +
                            internal::SectionName(e.type) + ") has " +
                            std::to_string(r.remaining()) + " unexpected trailing bytes");
  }
  return Status::Ok();
}

void AddSection(std::vector<uint8_t>& out, std::vector<SectionEntry>& table, uint32_t type,
                const std::vector<uint8_t>& payload) {
  ByteWriter w(out);
  w.PadTo(8);
  table.push_back({type, internal::kSectionRequired, out.size(), payload.size()});
  w.Raw(payload.data(), payload.size());
}

template <typename T, typename Fn>
std::vector<uint8_t> Payload(const T& value, Fn encode) {
  std::vector<uint8_t> p;
  ByteWriter w(p);
  encode(value, w);
  return p;
}

}  // namespace

Result<std::vector<uint8_t>> EncodeState(const MachineState& state) {
  RETURN_IF_ERROR(ValidateState(state));
  size_t count = 2 + state.vcpus.size() + (state.serial ? 1 : 0) + state.virtio.size();
  std::vector<uint8_t> out(kHeaderSize + count * kSectionEntrySize, 0);
  std::vector<SectionEntry> table;
  AddSection(out, table, internal::kSectionMachineConfig,
             Payload(state.config, internal::EncodeMachineConfig));
  AddSection(out, table, internal::kSectionVm, Payload(state.vm, internal::EncodeVm));
  for (const VcpuState& v : state.vcpus)
    AddSection(out, table, internal::kSectionVcpu, Payload(v, internal::EncodeVcpu));
  if (state.serial)
    AddSection(out, table, internal::kSectionSerial, Payload(*state.serial, internal::EncodeSerial));
  for (const VirtioDeviceState& d : state.virtio)
    AddSection(out, table, internal::kSectionVirtioDevice,
               Payload(d, internal::EncodeVirtioDevice));
  ByteWriter w(out);
  w.PadTo(8);
  uint64_t file_size = out.size() + kTrailerSize;

  std::vector<uint8_t> head;
  ByteWriter hw(head);
  hw.Raw(kMagic, sizeof(kMagic));
  hw.U16(kStateFormatMajor);
  hw.U16(kStateFormatMinor);
  hw.U32(kHeaderSize);
  hw.U32(kArchX86_64);
  hw.U32(static_cast<uint32_t>(table.size()));
  hw.U64(file_size);
  hw.U64(kHeaderSize);
  hw.PadTo(kHeaderSize);
  for (const SectionEntry& e : table) {
    hw.U32(e.type);
    hw.U32(e.flags);
    hw.U64(e.offset);
    hw.U64(e.length);
  }
  std::memcpy(out.data(), head.data(), head.size());
  w.U32(Crc32c(out));
  w.Raw(kEndMarker, sizeof(kEndMarker));
  return out;
}

Result<MachineState> DecodeState(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  ASSIGN_OR_RETURN(Header h, CheckEnvelope(bytes, limits));
  ASSIGN_OR_RETURN(std::vector<SectionEntry> table, ReadSectionTable(bytes, h, limits));
  bool newer_minor = h.minor > kStateFormatMinor;
  MachineState state;
  int config_count = 0, vm_count = 0;
  for (uint32_t i = 0; i < table.size(); ++i) {
    const SectionEntry& e = table[i];
    if (e.type < internal::kSectionMachineConfig || e.type > internal::kSectionVirtioDevice) {
      if (e.flags & internal::kSectionRequired) {
        return Status::FailedPrecondition(
            "state section " + std::to_string(i) + " has type " + std::to_string(e.type) +
            ", unknown to this build and marked required (file format " +
            std::to_string(h.major) + "." + std::to_string(h.minor) + ", this build reads up to " +
            std::to_string(kStateFormatMajor) + "." + std::to_string(kStateFormatMinor) + ")");
      }
      continue;  // optional data from a newer minor version
    }
    RETURN_IF_ERROR(DecodeSection(e, i, bytes.subspan(e.offset, e.length), newer_minor, limits,
                                  &state, &config_count, &vm_count));
  }
  if (config_count != 1 || vm_count != 1) {
    return Status::DataLoss("state file must have exactly one machine-config and one vm section "
                            "(has " + std::to_string(config_count) + " and " +
                            std::to_string(vm_count) + ")");
  }
  Status valid = ValidateState(state);
  if (!valid.ok()) return Status::DataLoss("state file is inconsistent: " + valid.message());
  state.newer_minor = newer_minor;
  return state;
}

}  // namespace kubicle::snapshot
