// Fuzzes what the node's API makes of a request target before any route
// runs (noderuntime/api/routes.cc): ParseTarget's split into a
// percent-decoded path and query parameters, PercentDecode, the route match
// of the decoded path, and the labelSelector parameter as the list and
// sweep routes read it (kube/label_selector.cc), matched against labels.
//
// Input: the bytes are the target as sent ("/v1/sandboxes?labelSelector=...").
//
// Checked: nothing crashes; decoding never grows its input; every byte
// string, percent-encoded, decodes back to itself; a target that parses,
// encoded again from its parts, parses to the same path and parameters;
// a selector that parses matches or not without crashing, and the empty
// selector matches everything; a guest port segment parses exactly when it
// is 1..65535 in canonical decimal (checked against a reading of its own),
// and only the ports route has one.
#include <map>
#include <string>
#include <string_view>

#include "fuzz/common/fuzz_input.h"
#include "kube/label_selector.h"
#include "noderuntime/api/routes.h"

namespace kubicle::fuzz {
namespace {

namespace api = noderuntime::api;

std::string Encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    out += '%';
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

void Decode(std::string_view text) {
  auto d = api::PercentDecode(text);
  if (d) FUZZ_CHECK(d->size() <= text.size());
  auto back = api::PercentDecode(Encode(text));
  FUZZ_CHECK(back && *back == text);
}

// As handlers.cc reads it: '+' is a space.
void Selector(std::string s, const std::map<std::string, std::string>& labels) {
  for (char& c : s) {
    if (c == '+') c = ' ';
  }
  auto sel = kube::LabelSelector::Parse(s);
  if (!sel.ok()) return;
  (void)sel->Matches(labels);
  (void)sel->Matches({});
  if (sel->empty()) FUZZ_CHECK(sel->Matches(labels));
}

// The port rule read independently of routes.cc: digits, no leading zero,
// 1..65535, printed back as itself.
bool CanonicalPort(std::string_view s) {
  if (s.empty() || s.size() > 5 || s.front() == '0') return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return std::stoul(std::string(s)) <= 65535;
}

void Port(std::string_view segment) {
  auto p = api::ParsePort(segment);
  FUZZ_CHECK(p.has_value() == CanonicalPort(segment));
  if (p) FUZZ_CHECK(std::to_string(*p) == segment && *p >= 1);
}

void Target(std::string_view text) {
  auto t = api::ParseTarget(text);
  if (!t) return;
  std::string again = Encode(t->path);
  char sep = '?';
  for (const auto& [k, v] : t->query) {
    again += sep + Encode(k) + "=" + Encode(v);
    sep = '&';
  }
  auto t2 = api::ParseTarget(again);
  FUZZ_CHECK(t2.has_value());
  FUZZ_CHECK(t2->path == t->path && t2->query == t->query);
  if (auto m = api::MatchRoute(t->path)) {
    FUZZ_CHECK(!api::AllowedMethods(m->route).empty());
    FUZZ_CHECK((m->route == api::Route::kPort) == !m->port.empty());
    if (m->route == api::Route::kPort) Port(m->port);
  }
  if (auto it = t->query.find("labelSelector"); it != t->query.end()) {
    Selector(it->second, t->query);
  }
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Decode(text);
  Target(text);
  Port(text);
  // The whole input as a selector too, so mutations reach the parser
  // without first forming a valid query.
  Selector(std::string(text), {{"kubicle.dev/run", "r1"}, {"app", "demo"}});
  return 0;
}
