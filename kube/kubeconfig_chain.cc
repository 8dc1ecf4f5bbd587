#include "kube/kubeconfig_chain.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "common/file_io.h"

namespace kubicle::kube {
namespace {

std::string Absolute(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return dir + "/" + path;
}

// Makes the file references of one named entry absolute.
void ResolveRefs(YAML::Node body, const std::string& dir,
                 std::initializer_list<const char*> fields) {
  if (!body || !body.IsMap()) return;
  for (const char* f : fields) {
    if (body[f] && body[f].IsScalar()) body[f] = Absolute(dir, body[f].as<std::string>());
  }
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Result<std::string> MergeOrThrow(const std::vector<KubeconfigFile>& files) {
  YAML::Node out;
  out["apiVersion"] = "v1";
  out["kind"] = "Config";
  struct List {
    const char* key;     // clusters, contexts, users
    const char* body;    // cluster, context, user
    std::initializer_list<const char*> refs;
  };
  const List lists[] = {{"clusters", "cluster", {"certificate-authority"}},
                        {"contexts", "context", {}},
                        {"users", "user", {"client-certificate", "client-key", "tokenFile"}}};
  std::set<std::string> seen[3];
  YAML::Node merged[3] = {YAML::Node(YAML::NodeType::Sequence), YAML::Node(YAML::NodeType::Sequence),
                          YAML::Node(YAML::NodeType::Sequence)};
  std::string current;
  for (const KubeconfigFile& f : files) {
    YAML::Node root = YAML::Load(f.text);
    if (root.IsNull()) continue;  // an empty file, as kubectl allows
    if (!root.IsMap()) return Status::InvalidArgument("a kubeconfig in " + f.dir + " is not a map");
    if (current.empty() && root["current-context"] && root["current-context"].IsScalar()) {
      current = root["current-context"].as<std::string>();
    }
    for (int i = 0; i < 3; ++i) {
      YAML::Node list = root[lists[i].key];
      if (!list || !list.IsSequence()) continue;
      for (YAML::Node item : list) {
        if (!item.IsMap() || !item["name"] || !item["name"].IsScalar()) continue;
        std::string name = item["name"].as<std::string>();
        if (!seen[i].insert(name).second) continue;  // the first file wins
        YAML::Node copy = YAML::Clone(item);
        ResolveRefs(copy[lists[i].body], f.dir, lists[i].refs);
        merged[i].push_back(copy);
      }
    }
  }
  for (int i = 0; i < 3; ++i) out[lists[i].key] = merged[i];
  if (!current.empty()) out["current-context"] = current;
  YAML::Emitter e;
  e << out;
  return std::string(e.c_str());
}

}  // namespace

Result<std::string> MergeKubeconfigs(const std::vector<KubeconfigFile>& files) {
  try {
    return MergeOrThrow(files);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("bad kubeconfig: ") + e.what());
  }
}

std::vector<std::string> KubeconfigPaths(const std::string& explicit_path,
                                         const std::string& kubeconfig_env,
                                         const std::string& home) {
  if (!explicit_path.empty()) return {explicit_path};
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= kubeconfig_env.size()) {
    size_t colon = kubeconfig_env.find(':', start);
    if (colon == std::string::npos) colon = kubeconfig_env.size();
    std::string p = kubeconfig_env.substr(start, colon - start);
    if (!p.empty() && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    start = colon + 1;
  }
  if (out.empty() && !home.empty()) out.push_back(home + "/.kube/config");
  return out;
}

Result<RestConfig> LoadKubeconfigLikeKubectl(const std::string& explicit_path,
                                             const std::string& context) {
  const char* env = std::getenv("KUBECONFIG");
  const char* home = std::getenv("HOME");
  auto paths = KubeconfigPaths(explicit_path, env ? env : "", home ? home : "");
  std::vector<KubeconfigFile> files;
  std::string tried;
  for (const std::string& p : paths) {
    auto text = ReadFileToString(p);
    if (!text.ok()) {
      if (!explicit_path.empty()) return Status::NotFound("cannot read kubeconfig " + p);
      tried += (tried.empty() ? "" : ", ") + p;
      continue;
    }
    files.push_back({std::move(*text), DirOf(p)});
  }
  if (files.empty()) {
    return Status::NotFound("no kubeconfig: none of " + (tried.empty() ? "(none)" : tried) +
                            " can be read (set --kubeconfig or $KUBECONFIG)");
  }
  ASSIGN_OR_RETURN(std::string merged, MergeKubeconfigs(files));
  return ParseKubeconfig(merged, "", context);
}

}  // namespace kubicle::kube
