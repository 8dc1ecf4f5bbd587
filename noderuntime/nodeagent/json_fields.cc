#include "noderuntime/nodeagent/json_fields.h"

namespace kubicle::noderuntime::nodeagent {

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
  return v.is_string() ? v.get<std::string>() : "";
}

int64_t IntAt(const Json& obj, std::initializer_list<std::string_view> path, int64_t def) {
  const Json& v = At(obj, path);
  return v.is_number_integer() ? v.get<int64_t>() : def;
}

double NumAt(const Json& obj, std::initializer_list<std::string_view> path, double def) {
  const Json& v = At(obj, path);
  return v.is_number() ? v.get<double>() : def;
}

std::string Bounded(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s + "...";
}

}  // namespace kubicle::noderuntime::nodeagent
