// Fuzzes the node HTTP API's request codecs and route parser
// (noderuntime/api/codec.cc, routes.cc), everything the API applies to a
// request before it calls the service: the JSON body of every route that
// takes one, base64, UTF-8, ids, labels, the route table and the bearer
// header. (The HTTP server itself is fuzzed where it is written.)
//
// Input: the bytes are used as a body, as a path and as a header value.
//
// Checked: nothing throws or crashes; base64 that decodes re-encodes to the
// same text, and encoded bytes decode to themselves; a template spec that
// parses converts back to JSON that parses; a matched route has a label and
// an allowed-method list.
#include <string>
#include <string_view>

#include "fuzz/common/fuzz_input.h"
#include "noderuntime/api/codec.h"
#include "noderuntime/api/routes.h"

namespace kubicle::fuzz {
namespace {

namespace api = noderuntime::api;

void Bodies(std::string_view text) {
  auto j = api::ParseJsonObject(text);
  if (!j.ok()) return;
  if (auto t = api::TemplateSpecFromJson(*j, "fuzz"); t.ok()) {
    FUZZ_CHECK(api::TemplateSpecFromJson(api::ToJson(*t), "fuzz").ok());
  }
  (void)api::SandboxSpecFromJson(*j);
  (void)api::ForkRequestFromJson(*j, "source");
  (void)api::ExecOptionsFromJson(*j);
  if (j->contains("labels") && (*j)["labels"].is_object()) {
    noderuntime::Labels labels;
    for (auto& [k, v] : (*j)["labels"].items())
      if (v.is_string()) labels[k] = v.get<std::string>();
    (void)api::ValidateLabels(labels);
  }
}

void Base64(std::string_view text) {
  if (auto b = api::Base64Decode(text); b.ok()) {
    FUZZ_CHECK(api::Base64Encode(*b) == text);
  }
  guest::protocol::ByteSpan bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  auto back = api::Base64Decode(api::Base64Encode(bytes));
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(guest::protocol::Bytes(bytes.begin(), bytes.end()) == *back);
  (void)api::IsValidUtf8(bytes);
  (void)api::ValidId(text);
}

void Routes(std::string_view text) {
  if (auto m = api::MatchRoute(text); m.has_value()) {
    for (const char* method : {"GET", "PUT", "POST", "DELETE", "PATCH"}) {
      (void)api::MethodAllowed(m->route, method);
      (void)api::RouteAccess(m->route, method);
      FUZZ_CHECK(!api::RouteLabel(m->route, method).empty());
    }
    FUZZ_CHECK(!api::AllowedMethods(m->route).empty());
  }
  if (auto token = api::ParseBearer(text); token.has_value()) {
    FUZZ_CHECK(api::ConstantTimeEqual(*token, *token));
  }
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Bodies(text);
  Base64(text);
  Routes(text);
  return 0;
}
