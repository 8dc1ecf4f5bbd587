// Fuzzes the node's state-directory records (noderuntime/state/records.cc):
// DecodeSandboxRecord and DecodeTemplateRecord on the same bytes, as
// kubicle-node reads record.json / spec.json after a restart (a file another
// version wrote, or a torn disk).
//
// Checked: nothing throws or crashes (nlohmann::json type errors must become
// DataLoss); a record that decodes encodes to JSON that decodes and encodes
// to the same text again.
#include <string>

#include "fuzz/common/fuzz_input.h"
#include "noderuntime/state/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace n = kubicle::noderuntime;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (auto r = n::DecodeSandboxRecord(text); r.ok()) {
    const std::string once = n::EncodeSandboxRecord(*r);
    auto again = n::DecodeSandboxRecord(once);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(n::EncodeSandboxRecord(*again) == once);
  }
  if (auto r = n::DecodeTemplateRecord(text); r.ok()) {
    const std::string once = n::EncodeTemplateRecord(*r);
    auto again = n::DecodeTemplateRecord(once);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(n::EncodeTemplateRecord(*again) == once);
  }
  if (auto r = n::DecodeWorkspaceRecord(text); r.ok()) {
    const std::string once = n::EncodeWorkspaceRecord(*r);
    auto again = n::DecodeWorkspaceRecord(once);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(n::EncodeWorkspaceRecord(*again) == once);
  }
  (void)n::ParseWorkspaceState(text);
  (void)n::ParseSandboxState(text);
  (void)n::ParseTemplateState(text);
  return 0;
}
