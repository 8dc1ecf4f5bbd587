#include "noderuntime/nodeagent/node_names.h"

#include <cctype>
#include <string_view>

#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::nodeagent {

std::string TemplateNodeIdPrefix(const std::string& uid) { return "t-" + uid + "-"; }

std::string TemplateNodeId(const std::string& uid, int64_t generation,
                           const std::optional<ShapeOverride>& shape) {
  std::string id = TemplateNodeIdPrefix(uid) + "g" + std::to_string(generation);
  if (shape) id += "-m" + std::to_string(shape->mem_mib) + "-c" + std::to_string(shape->vcpus);
  if (id.size() <= 63) return id;
  // Keeps the uid prefix, so cleanup by prefix still finds it.
  return TemplateNodeIdPrefix(uid) + Sha256Hex(id).substr(0, 63 - TemplateNodeIdPrefix(uid).size());
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty();
    for (char c : a) {
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_./=:,+@%").find(c) != std::string_view::npos);
    }
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) {
      if (c == '\'') out += "'\\''";
      else out += c;
    }
    out += '\'';
  }
  return out;
}

}  // namespace kubicle::noderuntime::nodeagent
