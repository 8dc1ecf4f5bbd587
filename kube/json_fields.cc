#include "kube/json_fields.h"

#include <limits>

namespace kubicle::kube {

const Json& At(const Json& obj, std::initializer_list<std::string_view> path) {
  static const Json kNull;
  const Json* cur = &obj;
  for (std::string_view key : path) {
    if (!cur->is_object()) return kNull;
    auto it = cur->find(key);
    if (it == cur->end()) return kNull;
    cur = &*it;
  }
  return *cur;
}

std::string StrAt(const Json& obj, std::initializer_list<std::string_view> path) {
  const Json& v = At(obj, path);
  return v.is_string() ? v.get<std::string>() : std::string();
}

bool IsInt64(const Json& v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  return v.is_number_integer();
}

int64_t IntAt(const Json& obj, std::initializer_list<std::string_view> path, int64_t def) {
  const Json& v = At(obj, path);
  return IsInt64(v) ? v.get<int64_t>() : def;
}

double NumAt(const Json& obj, std::initializer_list<std::string_view> path, double def) {
  const Json& v = At(obj, path);
  return v.is_number() ? v.get<double>() : def;
}

bool BoolAt(const Json& obj, std::initializer_list<std::string_view> path, bool def) {
  const Json& v = At(obj, path);
  return v.is_boolean() ? v.get<bool>() : def;
}

std::string Bounded(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s + "...";
}

}  // namespace kubicle::kube
