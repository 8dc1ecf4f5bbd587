// Names a Kubernetes API resource (group/version/plural) and builds its REST
// paths. Objects are handled as unstructured JSON (nlohmann::json), the way
// client-go's dynamic client does, so one client serves every kind.
#pragma once

#include <string>
#include <string_view>

namespace kubicle::kube {

struct Resource {
  std::string group;    // "" for the core group
  std::string version;  // "v1", "v1alpha1"
  std::string plural;   // "sandboxes"
  std::string kind;     // "Sandbox"
  bool namespaced = true;

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
  // /api/v1/namespaces/ns/secrets/name/status; ns may be empty (all
  // namespaces for a list/watch), name and subresource may be empty.
  std::string Path(std::string_view ns, std::string_view name = {},
                   std::string_view subresource = {}) const;
  // Key used in logs, caches and tests: "sandboxes.kubicle.dev".
  std::string GroupResource() const { return group.empty() ? plural : plural + "." + group; }
};

inline constexpr std::string_view kGroup = "kubicle.dev";
inline constexpr std::string_view kVersion = "v1alpha1";

const Resource& SandboxResource();
const Resource& SandboxTemplateResource();
const Resource& SandboxForkResource();
const Resource& WorkspaceResource();
const Resource& SecretResource();
const Resource& LeaseResource();
const Resource& EventResource();
const Resource& NamespaceResource();

// "ns/name" -- the work queue and cache key of a namespaced object.
std::string ObjectKey(std::string_view ns, std::string_view name);
// Splits "ns/name" (or "name" for cluster-scoped objects).
void SplitKey(std::string_view key, std::string* ns, std::string* name);

}  // namespace kubicle::kube
