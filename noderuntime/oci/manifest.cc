#include "noderuntime/oci/manifest.h"

#include <nlohmann/json.hpp>

#include "noderuntime/oci/reference.h"

namespace kubicle::noderuntime::oci {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxConfigString = 64 << 10;
constexpr size_t kMaxConfigList = 4096;

bool IsLayerType(const std::string& t) {
  return t.rfind("application/vnd.oci.image.layer.v1.tar", 0) == 0 ||
         t.rfind("application/vnd.docker.image.rootfs.diff.tar", 0) == 0;
}

Result<Descriptor> ParseDescriptor(const Json& j, const char* what) {
  if (!j.is_object()) return Status::InvalidArgument(std::string(what) + " is not an object");
  Descriptor d;
  auto mt = j.find("mediaType");
  if (mt != j.end() && mt->is_string()) d.media_type = mt->get<std::string>();
  auto dg = j.find("digest");
  if (dg == j.end() || !dg->is_string() || !IsSha256Digest(dg->get<std::string>()))
    return Status::InvalidArgument(std::string(what) + "'s digest is not sha256:<64 hex>");
  d.digest = dg->get<std::string>();
  auto sz = j.find("size");
  if (sz == j.end() || !sz->is_number_unsigned())
    return Status::InvalidArgument(std::string(what) + "'s size is not a non-negative integer");
  d.size = sz->get<uint64_t>();
  if (auto p = j.find("platform"); p != j.end() && p->is_object()) {
    if (auto os = p->find("os"); os != p->end() && os->is_string()) d.os = os->get<std::string>();
    if (auto a = p->find("architecture"); a != p->end() && a->is_string())
      d.architecture = a->get<std::string>();
  }
  return d;
}

Result<ParsedManifest> ParseIndex(const Json& j) {
  auto m = j.find("manifests");
  if (m == j.end() || !m->is_array()) return Status::InvalidArgument("index without manifests[]");
  if (m->size() > kMaxIndexEntries)
    return Status::ResourceExhausted("index with more than " + std::to_string(kMaxIndexEntries) +
                                     " entries");
  ParsedManifest out;
  out.is_index = true;
  for (const Json& e : *m) {
    ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor(e, "an index entry"));
    out.entries.push_back(std::move(d));
  }
  return out;
}

Result<ParsedManifest> ParseImage(const Json& j) {
  ParsedManifest out;
  auto c = j.find("config");
  if (c == j.end()) return Status::InvalidArgument("manifest without config");
  ASSIGN_OR_RETURN(out.config, ParseDescriptor(*c, "the config"));
  auto l = j.find("layers");
  if (l == j.end() || !l->is_array()) return Status::InvalidArgument("manifest without layers[]");
  if (l->size() > kMaxLayers)
    return Status::ResourceExhausted("manifest with more than " + std::to_string(kMaxLayers) +
                                     " layers");
  for (const Json& e : *l) {
    ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor(e, "a layer"));
    if (!IsLayerType(d.media_type))
      return Status::InvalidArgument("a layer of media type \"" + d.media_type.substr(0, 200) +
                                     "\" (not a tar layer)");
    out.layers.push_back(std::move(d));
  }
  return out;
}

// A string list field of the config: absent or null is empty.
Result<std::vector<std::string>> StringList(const Json& c, const char* key) {
  std::vector<std::string> out;
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return out;
  if (!it->is_array() || it->size() > kMaxConfigList)
    return Status::InvalidArgument(std::string("config ") + key + " is not a list of at most " +
                                   std::to_string(kMaxConfigList) + " strings");
  for (const Json& s : *it) {
    if (!s.is_string() || s.get_ref<const std::string&>().size() > kMaxConfigString)
      return Status::InvalidArgument(std::string("config ") + key +
                                     " has a non-string or a string over 64 KiB");
    out.push_back(s.get<std::string>());
  }
  return out;
}

Result<std::string> StringField(const Json& c, const char* key) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return std::string();
  if (!it->is_string() || it->get_ref<const std::string&>().size() > kMaxConfigString)
    return Status::InvalidArgument(std::string("config ") + key +
                                   " is not a string of at most 64 KiB");
  return it->get<std::string>();
}

}  // namespace

std::string ManifestAccept() {
  return std::string(kOciIndex) + ", " + std::string(kOciManifest) + ", " +
         std::string(kDockerList) + ", " + std::string(kDockerManifest);
}

Result<ParsedManifest> ParseManifest(std::string_view body, std::string_view content_type) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("manifest is not a JSON object");
  std::string type;
  if (auto mt = j.find("mediaType"); mt != j.end() && mt->is_string())
    type = mt->get<std::string>();
  // Content-Type may carry parameters ("; charset=utf-8").
  std::string header(content_type.substr(0, content_type.find(';')));
  while (!header.empty() && header.back() == ' ') header.pop_back();
  if (!type.empty() && !header.empty() && header != type && header != "application/json")
    return Status::InvalidArgument("manifest's mediaType \"" + type.substr(0, 200) +
                                   "\" disagrees with its Content-Type \"" + header.substr(0, 200) +
                                   "\"");
  if (type.empty()) type = header;
  // An OCI index or manifest may omit mediaType; its shape says which.
  if (type.empty() || type == "application/json")
    type = j.contains("manifests") ? kOciIndex : kOciManifest;
  if (type == kOciIndex || type == kDockerList) return ParseIndex(j);
  if (type == kOciManifest || type == kDockerManifest) return ParseImage(j);
  return Status::InvalidArgument("unsupported manifest media type \"" + type.substr(0, 200) + "\"");
}

Result<Descriptor> ChoosePlatform(const ParsedManifest& index, std::string_view os,
                                  std::string_view architecture) {
  std::string seen;
  for (const Descriptor& d : index.entries) {
    if (d.os == os && d.architecture == architecture) return d;
    if (seen.size() < 400) seen += (seen.empty() ? "" : ", ") + d.os + "/" + d.architecture;
  }
  return Status::NotFound("the image index has no " + std::string(os) + "/" +
                          std::string(architecture) +
                          " manifest (it has: " + (seen.empty() ? "none" : seen) + ")");
}

Result<ImageConfig> ParseImageConfig(std::string_view body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("image config is not a JSON object");
  ImageConfig out;
  auto c = j.find("config");
  if (c == j.end() || c->is_null()) return out;
  if (!c->is_object()) return Status::InvalidArgument("image config's config is not an object");
  ASSIGN_OR_RETURN(out.env, StringList(*c, "Env"));
  ASSIGN_OR_RETURN(out.entrypoint, StringList(*c, "Entrypoint"));
  ASSIGN_OR_RETURN(out.cmd, StringList(*c, "Cmd"));
  ASSIGN_OR_RETURN(out.working_dir, StringField(*c, "WorkingDir"));
  ASSIGN_OR_RETURN(out.user, StringField(*c, "User"));
  return out;
}

}  // namespace kubicle::noderuntime::oci
