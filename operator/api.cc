#include "operator/api.h"

#include <cstdio>

#include "kube/time_format.h"

namespace kubicle::op {

namespace {
const Json& Meta(const Json& obj) {
  static const Json kEmpty = Json::object();
  return obj.contains("metadata") ? obj["metadata"] : kEmpty;
}
}  // namespace

std::string Name(const Json& obj) { return Meta(obj).value("name", ""); }
std::string Namespace(const Json& obj) { return Meta(obj).value("namespace", ""); }
std::string Uid(const Json& obj) { return Meta(obj).value("uid", ""); }
int64_t Generation(const Json& obj) { return Meta(obj).value("generation", int64_t{0}); }

std::string Label(const Json& obj, std::string_view key) {
  const Json& md = Meta(obj);
  if (!md.contains("labels")) return "";
  return md["labels"].value(std::string(key), "");
}

std::map<std::string, std::string> Labels(const Json& obj) {
  std::map<std::string, std::string> out;
  const Json& md = Meta(obj);
  if (md.contains("labels") && md["labels"].is_object()) {
    for (const auto& [k, v] : md["labels"].items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  return out;
}

bool IsDeleting(const Json& obj) { return Meta(obj).contains("deletionTimestamp"); }

bool HasFinalizer(const Json& obj, std::string_view f) {
  for (const Json& x : Meta(obj).value("finalizers", Json::array())) {
    if (x == f) return true;
  }
  return false;
}

std::string StatusString(const Json& obj, std::string_view field) {
  if (!obj.contains("status") || !obj["status"].is_object()) return "";
  const Json& v = obj["status"].value(std::string(field), Json());
  return v.is_string() ? v.get<std::string>() : "";
}

Json SetCondition(const Json& conditions, const Condition& c, int64_t generation,
                  kube::TimePoint now) {
  Json out = Json::array();
  bool found = false;
  for (const Json& existing : conditions.is_array() ? conditions : Json::array()) {
    if (existing.value("type", "") != c.type) {
      out.push_back(existing);
      continue;
    }
    found = true;
    Json n = {{"type", c.type}, {"status", c.status}, {"reason", c.reason},
              {"message", c.message}, {"observedGeneration", generation}};
    n["lastTransitionTime"] = existing.value("status", "") == c.status
                                  ? existing.value("lastTransitionTime", kube::FormatTime(now))
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
  if (!obj.contains("status") || !obj["status"].contains("conditions")) return std::nullopt;
  for (const Json& c : obj["status"]["conditions"]) {
    if (c.value("type", "") == type) return c;
  }
  return std::nullopt;
}

Json ControllerRef(const Json& owner) {
  return Json{{"apiVersion", owner.value("apiVersion", "")}, {"kind", owner.value("kind", "")},
              {"name", Name(owner)}, {"uid", Uid(owner)}, {"controller", true},
              {"blockOwnerDeletion", true}};
}

bool IsControlledBy(const Json& obj, const std::string& owner_uid) {
  for (const Json& ref : Meta(obj).value("ownerReferences", Json::array())) {
    if (ref.value("uid", "") == owner_uid && ref.value("controller", false)) return true;
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

}  // namespace kubicle::op
