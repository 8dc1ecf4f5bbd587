// Fuzzes the snapshot directory's JSON files (snapshot/meta.cc): ParseMeta
// on `meta.json` and CheckDiskIndex on the `disk` index against a sample
// state with block devices.
//
// Checked: nothing throws or crashes (nlohmann::json type errors must be
// turned into Status); a meta that parses re-serialises to JSON that parses
// to the same SnapshotMeta.
#include <string>

#include "fuzz/common/fuzz_input.h"
#include "snapshot/meta.h"
#include "snapshot/testing/sample_state.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubicle::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace s = kubicle::snapshot;
  static const s::MachineState state = s::testing::SampleState();
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto meta = s::ParseMeta(text);
  if (meta.ok()) {
    auto again = s::ParseMeta(s::MetaToJson(*meta));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(*again == *meta);
  }
  (void)s::CheckDiskIndex(text, state);
  return 0;
}
