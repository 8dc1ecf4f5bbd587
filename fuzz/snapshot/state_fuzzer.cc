// Fuzzes the snapshot `state` decoder (snapshot/state_file.cc and
// state_sections.cc): DecodeState on the input as it is, and again after
// the envelope is repaired (declared size, end marker and CRC-32C set to
// match), so mutations reach the section table and the sections instead of
// stopping at the checksum.
//
// Checked: nothing crashes; whatever decodes passes ValidateState, encodes,
// and decodes again to an equal MachineState (round trip).
#include <cstring>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "snapshot/crc32c.h"
#include "snapshot/state.h"

namespace kubicle::fuzz {
namespace {

namespace s = snapshot;

void Decode(std::span<const uint8_t> bytes) {
  s::DecodeLimits limits;
  limits.max_file_bytes = 1 << 20;
  auto st = s::DecodeState(bytes, limits);
  if (!st.ok()) return;
  FUZZ_CHECK(s::ValidateState(*st).ok());
  auto encoded = s::EncodeState(*st);
  FUZZ_CHECK(encoded.ok());
  auto again = s::DecodeState(*encoded, limits);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *st);
}

// Header: file_size at 24; trailer: CRC-32C of everything before it, "KEND".
void Repair(std::vector<uint8_t>& b) {
  constexpr size_t kHeader = 64, kTrailer = 8;
  if (b.size() < kHeader + kTrailer) return;
  const uint64_t size = b.size();
  std::memcpy(b.data() + 24, &size, 8);
  const size_t body = b.size() - kTrailer;
  std::memcpy(b.data() + body + 4, "KEND", 4);
  const uint32_t crc = s::Crc32c({b.data(), body});
  std::memcpy(b.data() + body, &crc, 4);
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  Decode({data, size});
  std::vector<uint8_t> fixed(data, data + size);
  Repair(fixed);
  Decode(fixed);
  return 0;
}
