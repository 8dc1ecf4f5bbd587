#include "kube/resource.h"

namespace kubicle::kube {

std::string Resource::Path(std::string_view ns, std::string_view name,
                           std::string_view subresource) const {
  std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (namespaced && !ns.empty()) {
    p += "/namespaces/";
    p += ns;
  }
  p += "/" + plural;
  if (!name.empty()) {
    p += "/";
    p += name;
    if (!subresource.empty()) {
      p += "/";
      p += subresource;
    }
  }
  return p;
}

namespace {
Resource Make(std::string group, std::string version, std::string plural, std::string kind,
              bool namespaced = true) {
  return Resource{std::move(group), std::move(version), std::move(plural), std::move(kind),
                  namespaced};
}
}  // namespace

const Resource& SandboxResource() {
  static const Resource r = Make("kubicle.dev", "v1alpha1", "sandboxes", "Sandbox");
  return r;
}
const Resource& SandboxTemplateResource() {
  static const Resource r = Make("kubicle.dev", "v1alpha1", "sandboxtemplates", "SandboxTemplate");
  return r;
}
const Resource& SandboxForkResource() {
  static const Resource r = Make("kubicle.dev", "v1alpha1", "sandboxforks", "SandboxFork");
  return r;
}
const Resource& WorkspaceResource() {
  static const Resource r = Make("kubicle.dev", "v1alpha1", "workspaces", "Workspace");
  return r;
}
const Resource& SecretResource() {
  static const Resource r = Make("", "v1", "secrets", "Secret");
  return r;
}
const Resource& LeaseResource() {
  static const Resource r = Make("coordination.k8s.io", "v1", "leases", "Lease");
  return r;
}
const Resource& EventResource() {
  static const Resource r = Make("", "v1", "events", "Event");
  return r;
}
const Resource& NamespaceResource() {
  static const Resource r = Make("", "v1", "namespaces", "Namespace", false);
  return r;
}

std::string ObjectKey(std::string_view ns, std::string_view name) {
  if (ns.empty()) return std::string(name);
  return std::string(ns) + "/" + std::string(name);
}

void SplitKey(std::string_view key, std::string* ns, std::string* name) {
  size_t slash = key.find('/');
  if (slash == std::string_view::npos) {
    ns->clear();
    *name = std::string(key);
  } else {
    *ns = std::string(key.substr(0, slash));
    *name = std::string(key.substr(slash + 1));
  }
}

}  // namespace kubicle::kube
