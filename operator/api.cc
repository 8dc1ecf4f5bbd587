#include "operator/api.h"

#include <openssl/rand.h>

#include <cstdio>
#include <span>

#include "common/hex.h"

#include "kube/json_fields.h"
#include "kube/time_format.h"

namespace kubicle::op {

using kube::At;
using kube::StrAt;

std::string Name(const Json& obj) { return StrAt(obj, {"metadata", "name"}); }
std::string Namespace(const Json& obj) { return StrAt(obj, {"metadata", "namespace"}); }
std::string Uid(const Json& obj) { return StrAt(obj, {"metadata", "uid"}); }
int64_t Generation(const Json& obj) { return kube::IntAt(obj, {"metadata", "generation"}); }

std::string Label(const Json& obj, std::string_view key) {
  return StrAt(obj, {"metadata", "labels", key});
}

std::map<std::string, std::string> Labels(const Json& obj) {
  std::map<std::string, std::string> out;
  const Json& labels = At(obj, {"metadata", "labels"});
  if (!labels.is_object()) return out;
  for (const auto& [k, v] : labels.items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

bool IsDeleting(const Json& obj) { return !At(obj, {"metadata", "deletionTimestamp"}).is_null(); }

bool HasFinalizer(const Json& obj, std::string_view f) {
  const Json& list = At(obj, {"metadata", "finalizers"});
  if (!list.is_array()) return false;
  for (const Json& x : list) {
    if (x.is_string() && x.get<std::string>() == f) return true;
  }
  return false;
}

std::string StatusString(const Json& obj, std::string_view field) {
  return StrAt(obj, {"status", field});
}

Json SetCondition(const Json& conditions, const Condition& c, int64_t generation,
                  kube::TimePoint now) {
  Json out = Json::array();
  bool found = false;
  static const Json kNone = Json::array();
  for (const Json& existing : conditions.is_array() ? conditions : kNone) {
    if (!existing.is_object()) continue;  // not a condition: dropped
    if (StrAt(existing, {"type"}) != c.type) {
      out.push_back(existing);
      continue;
    }
    found = true;
    Json n = {{"type", c.type}, {"status", c.status}, {"reason", c.reason},
              {"message", c.message}, {"observedGeneration", generation}};
    const std::string since = StrAt(existing, {"lastTransitionTime"});
    n["lastTransitionTime"] = StrAt(existing, {"status"}) == c.status && !since.empty()
                                  ? since
                                  : kube::FormatTime(now);
    out.push_back(n);
  }
  if (!found) {
    out.push_back({{"type", c.type}, {"status", c.status}, {"reason", c.reason},
                   {"message", c.message}, {"observedGeneration", generation},
                   {"lastTransitionTime", kube::FormatTime(now)}});
  }
  return out;
}

std::optional<Json> FindCondition(const Json& obj, std::string_view type) {
  const Json& list = At(obj, {"status", "conditions"});
  if (!list.is_array()) return std::nullopt;
  for (const Json& c : list) {
    if (c.is_object() && StrAt(c, {"type"}) == type) return c;
  }
  return std::nullopt;
}

Json SetProgress(const Json& conditions, Progress p, const Condition& why, int64_t generation,
                 kube::TimePoint now) {
  const Condition reconciling =
      p == Progress::kWorking   ? Condition{"Reconciling", "True", why.reason, why.message}
      : p == Progress::kStalled ? Condition{"Reconciling", "False", "Stalled", "stopped: see Stalled"}
                                : Condition{"Reconciling", "False", "Reconciled", "nothing in progress"};
  const Condition stalled = p == Progress::kStalled
                                ? Condition{"Stalled", "True", why.reason, why.message}
                                : Condition{"Stalled", "False", "NotStalled", "no failure"};
  return SetCondition(SetCondition(conditions, reconciling, generation, now), stalled, generation, now);
}

Json ControllerRef(const Json& owner) {
  return Json{{"apiVersion", StrAt(owner, {"apiVersion"})}, {"kind", StrAt(owner, {"kind"})},
              {"name", Name(owner)}, {"uid", Uid(owner)}, {"controller", true},
              {"blockOwnerDeletion", true}};
}

bool IsControlledBy(const Json& obj, const std::string& owner_uid) {
  const Json& refs = At(obj, {"metadata", "ownerReferences"});
  if (!refs.is_array()) return false;
  for (const Json& ref : refs) {
    if (StrAt(ref, {"uid"}) == owner_uid && kube::BoolAt(ref, {"controller"})) return true;
  }
  return false;
}

std::string BoundedName(const std::string& base, const std::string& suffix, size_t max) {
  if (base.size() + suffix.size() <= max) return base + suffix;
  uint32_t h = 2166136261u;  // FNV-1a: stable across builds, unlike std::hash
  for (unsigned char c : base) h = (h ^ c) * 16777619u;
  char hash[16];
  std::snprintf(hash, sizeof(hash), "-%08x", h);
  return base.substr(0, max - suffix.size() - 9) + hash + suffix;
}

Result<std::string> NewToken() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return Status::Internal("RAND_bytes failed");
  return HexEncode(std::span<const uint8_t>(raw, sizeof(raw)));
}

}  // namespace kubicle::op
