// Fuzzes the snapshot directory's JSON files (snapshot/meta.cc): ParseMeta
// on `meta.json` and ParseDiskIndex on the `disk` index.
//
// Checked: nothing throws or crashes (nlohmann::json type errors must be
// turned into Status); a meta or a disk index that parses re-serialises to
// JSON that parses to the same value.
#include <string>

#include "fuzz/common/fuzz_input.h"
#include "snapshot/meta.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace s = kubicle::snapshot;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto meta = s::ParseMeta(text);
  if (meta.ok()) {
    auto again = s::ParseMeta(s::MetaToJson(*meta));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(*again == *meta);
  }
  auto disks = s::ParseDiskIndex(text);
  if (disks.ok()) {
    auto again = s::ParseDiskIndex(s::DiskIndexToJson(*disks));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(*again == *disks);
  }
  return 0;
}
