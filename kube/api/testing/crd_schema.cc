#include "kube/api/testing/crd_schema.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

namespace kubicle::kube::api::testing {

namespace {

Json FromYaml(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : n) out[kv.first.as<std::string>()] = FromYaml(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : n) out.push_back(FromYaml(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted: a string whatever it reads as
      if (s == "true" || s == "false") return s == "true";
      int64_t i = 0;
      if (YAML::convert<int64_t>::decode(n, i)) return i;
      return s;
    }
    default:
      return nullptr;
  }
}

bool Preserves(const Json& node) {
  auto it = node.find("x-kubernetes-preserve-unknown-fields");
  return it != node.end() && it->is_boolean() && it->get<bool>();
}

std::string TypeOf(const Json& node) {
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : "";
}

void Paths(const Json& node, const std::string& path, std::vector<std::string>* out) {
  if (Preserves(node)) return;
  if (auto p = node.find("properties"); p != node.end() && p->is_object()) {
    for (const auto& [k, v] : p->items()) {
      const std::string child = path.empty() ? k : path + "." + k;
      out->push_back(child);
      Paths(v, child, out);
    }
  }
  if (auto items = node.find("items"); items != node.end() && items->is_object()) {
    out->push_back(path + "[]");
    Paths(*items, path + "[]", out);
  }
}

void CheckWrite(const Json* node, const Json& v, const std::string& path, std::vector<std::string>* out) {
  if (!node) {
    out->push_back(path + ": not in the schema");
    return;
  }
  // metadata is the apiserver's (ObjectMeta), not the CRD's to declare.
  if (v.is_null() || Preserves(*node) || path == "metadata") return;
  const char* type = v.is_object() ? "object" : v.is_array() ? "array" : v.is_string() ? "string"
                     : v.is_boolean() ? "boolean" : v.is_number_integer() || v.is_number_unsigned() ? "integer"
                     : "number";
  if (!Compatible(*node, type)) {
    out->push_back(path + ": written as " + type + ", the schema says " + TypeOf(*node));
    return;
  }
  if (v.is_object()) {
    for (const auto& [k, child] : v.items()) {
      const std::string p = path.empty() ? k : path + "." + k;
      CheckWrite(SchemaAt(*node, k), child, p, out);
    }
  }
  if (v.is_array()) {
    for (const Json& child : v) CheckWrite(SchemaAt(*node, "[]"), child, path + "[]", out);
  }
}

}  // namespace

Result<Json> LoadCrdSchema(const std::string& crds_dir, std::string_view kind) {
  try {
    for (const auto& entry : std::filesystem::directory_iterator(crds_dir)) {
      if (entry.path().extension() != ".yaml") continue;
      const YAML::Node crd = YAML::LoadFile(entry.path().string());
      if (crd["spec"]["names"]["kind"].as<std::string>("") != kind) continue;
      for (const auto& v : crd["spec"]["versions"]) {
        if (v["name"].as<std::string>("") == "v1alpha1") return FromYaml(v["schema"]["openAPIV3Schema"]);
      }
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("reading ") + crds_dir + ": " + e.what());
  }
  return Status::NotFound("no CRD of kind " + std::string(kind) + " in " + crds_dir);
}

const Json* SchemaAt(const Json& schema, std::string_view path) {
  const Json* node = &schema;
  size_t i = 0;
  while (i < path.size()) {
    if (Preserves(*node)) return node;
    if (path.substr(i, 2) == "[]") {
      auto items = node->find("items");
      if (items == node->end()) return nullptr;
      node = &*items;
      i += 2;
      if (i < path.size() && path[i] == '.') ++i;
      continue;
    }
    size_t end = path.find_first_of(".[", i);
    if (end == std::string_view::npos) end = path.size();
    const std::string key(path.substr(i, end - i));
    auto props = node->find("properties");
    auto extra = node->find("additionalProperties");
    if (props != node->end() && props->contains(key)) {
      node = &(*props)[key];
    } else if (extra != node->end() && extra->is_object()) {
      node = &*extra;
    } else {
      return nullptr;
    }
    i = end;
    if (i < path.size() && path[i] == '.') ++i;
  }
  return node;
}

Json SampleOf(const Json& node) {
  const std::string type = TypeOf(node);
  if (auto e = node.find("enum"); e != node.end() && e->is_array() && !e->empty()) return (*e)[0];
  if (type == "object" || (type.empty() && node.contains("properties"))) {
    Json out = Json::object();
    if (auto p = node.find("properties"); p != node.end()) {
      for (const auto& [k, v] : p->items()) out[k] = SampleOf(v);
    }
    if (auto extra = node.find("additionalProperties"); extra != node.end() && extra->is_object()) {
      out["key"] = SampleOf(*extra);
    }
    return out;
  }
  if (type == "array") return Json::array({SampleOf(node.value("items", Json::object()))});
  if (type == "string") return "x";
  if (type == "boolean") return true;
  if (type == "integer" || type == "number") {
    const int64_t min = node.contains("minimum") && node["minimum"].is_number() ? node["minimum"].get<int64_t>() : 0;
    const int64_t n = std::max<int64_t>(min, 1);
    return type == "integer" ? Json(n) : Json(static_cast<double>(n) + 0.5);
  }
  return "free-form";  // preserve-unknown-fields without a type
}

std::vector<std::string> SchemaPaths(const Json& schema, std::string_view prefix) {
  std::vector<std::string> out;
  const Json* node = SchemaAt(schema, prefix);
  if (node) Paths(*node, std::string(prefix), &out);
  return out;
}

bool Compatible(const Json& node, std::string_view read) {
  if (read == "any" || Preserves(node)) return true;
  const std::string type = TypeOf(node);
  if (read == "number") return type == "number" || type == "integer";
  if (read == "map") {
    auto extra = node.find("additionalProperties");
    return type == "object" && extra != node.end() && extra->is_object() && TypeOf(*extra) == "string";
  }
  return type == read;
}

std::vector<std::string> WriteProblems(const Json& schema, const Json& written) {
  std::vector<std::string> out;
  CheckWrite(&schema, written, "", &out);
  return out;
}

}  // namespace kubicle::kube::api::testing
