// How the node agent names what it creates in SandboxService from the
// Kubernetes objects it serves. Object names are DNS subdomains of up to
// 253 characters with dots; node ids are DNS labels of at most 63. Ids are
// therefore derived from the object's UID, never its name: unique, stable
// across node restarts (so a restarted agent finds its VMs), and never
// reused by a later object of the same name. Clients address a sandbox on
// the data plane by this id (docs/operator.md, "Node protocol").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kube/api/names.h"

namespace kubicle::noderuntime::nodeagent {

// Labels the agent puts on its VMs (besides the Sandbox's own labels).
inline const std::string kLabelSandboxUid(kube::api::kLabelSandboxUid);
inline const std::string kLabelNamespace(kube::api::kLabelNamespace);

// "k-<uid>": the node id of the Sandbox with this metadata.uid (the
// contract's SandboxVmId: clients address the VM by it).
inline std::string SandboxNodeId(const std::string& uid) { return kube::api::SandboxVmId(uid); }

// A VM shape that differs from its template's (Sandbox spec.resources).
struct ShapeOverride {
  uint64_t mem_mib = 0;
  uint32_t vcpus = 0;
  bool operator==(const ShapeOverride&) const = default;
};

// "t-<uid>-g<generation>", or with "-m<MiB>-c<vCPUs>" for a shape variant:
// the node template baked for one generation of a SandboxTemplate. Hashed
// to fit 63 characters if it would not (very large generations).
std::string TemplateNodeId(const std::string& uid, int64_t generation,
                           const std::optional<ShapeOverride>& shape = std::nullopt);
// The "t-<uid>-" prefix every node template of that SandboxTemplate has.
std::string TemplateNodeIdPrefix(const std::string& uid);

// POSIX-shell quoting of an argv, for warm-up commands (the baker runs a
// shell command; a guest without a shell gets its plain words back).
std::string ShellJoin(const std::vector<std::string>& argv);

}  // namespace kubicle::noderuntime::nodeagent
