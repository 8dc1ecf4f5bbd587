// Typed views of the operator's kinds (Sandbox, SandboxTemplate,
// SandboxFork, Workspace; fields in docs/api.md), parsed once from the unstructured
// JSON an informer cache or the client hands out, so reconcilers and the
// pure status functions read fields instead of JSON paths.
//
// Contracts:
// - Parsing never throws and never fails. A missing (or null) field reads as
//   absent: std::nullopt, "", an empty list, or the documented default.
// - A spec field present with the wrong type, or an integer outside what the
//   operator can compute with, also reads as absent and is named in
//   `problems` ("spec.replicas: expected an integer, got string"). The
//   reconcilers do not act on a spec with problems; they report it
//   (InvalidSpec) instead of guessing. The apiserver's schema refuses such
//   objects: the views are there so a CRD installed without it, an object
//   from an older schema or a hostile writer cannot crash the operator.
// - Wrong shapes outside the spec (metadata, status the operator or a node
//   daemon wrote) read as absent without a problem: the next status write
//   replaces the operator's own fields, and a garbled node report means
//   "no report".
// - A view owns the object it was parsed from (`object`): writes need it
//   (resourceVersion guards, owner references, the status diff).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kube/kube_client.h"

namespace kubicle::op {

using kube::Json;

// metadata, as every object has it.
struct ObjectMeta {
  std::string name, ns, uid, resource_version, creation_timestamp;
  int64_t generation = 0;
  bool deleting = false;                      // deletionTimestamp is set
  std::map<std::string, std::string> labels;  // string values only
  std::vector<std::string> finalizers;        // string entries only

  std::string Label(std::string_view key) const;  // "" when absent
  bool HasFinalizer(std::string_view finalizer) const;
  std::string Key() const;  // "namespace/name"
};
ObjectMeta ParseObjectMeta(const Json& obj);

// --- Sandbox -------------------------------------------------------------

struct SandboxSpec {
  std::string template_name;               // templateRef.name
  std::optional<int64_t> ttl_seconds;      // 0 .. 100 years
  std::optional<std::string> expires_at;   // RFC 3339, as written
  std::optional<std::string> fork_source;  // set on SandboxFork children
  std::optional<int64_t> memory_mib;       // resources.memoryMiB
  std::optional<int64_t> vcpus;            // resources.vcpus
  bool suspend = false;                    // spec.suspend (the node acts on it)
  std::optional<std::string> workspace;    // workspaceRef.name
  // env and resources are checked for their shape only: fork children copy
  // them verbatim from the object (DesiredForkChild), the node reads them.
};
// `problems` may be null (not recorded).
SandboxSpec ParseSandboxSpec(const Json& sandbox, std::vector<std::string>* problems);

struct SandboxStatus {
  std::string phase, node_name, expires_at, token_secret_name, token_sha256;
  std::string vm_state, vm_message;  // status.vm: the node daemon's report
  Json conditions = Json::array();   // object entries only
};

struct SandboxView {
  Json object;
  ObjectMeta meta;
  SandboxSpec spec;
  SandboxStatus status;
  std::vector<std::string> problems;  // of the spec

  static SandboxView Parse(Json object);
};

// --- SandboxTemplate -----------------------------------------------------

struct SandboxTemplateSpec {
  std::optional<std::string> kernel, initrd, rootfs;
  std::optional<int64_t> memory_mib;
  // warmup[].command; an item that is not a string reads as "".
  std::vector<std::vector<std::string>> warmup_commands;
};
SandboxTemplateSpec ParseSandboxTemplateSpec(const Json& tmpl, std::vector<std::string>* problems);

// One node daemon's entry in status.nodes[].
struct TemplateNodeEntry {
  std::string node_name, phase;
  int64_t observed_generation = 0;
  std::string message;  // why, when Failed
};

struct SandboxTemplateStatus {
  std::vector<TemplateNodeEntry> nodes;  // entries without a nodeName dropped
  Json conditions = Json::array();
};

struct SandboxTemplateView {
  Json object;
  ObjectMeta meta;
  SandboxTemplateSpec spec;
  SandboxTemplateStatus status;
  std::vector<std::string> problems;  // of the spec

  static SandboxTemplateView Parse(Json object);
};

// --- SandboxFork ---------------------------------------------------------

struct SandboxForkSpec {
  std::string source_name;  // sourceRef.name
  int64_t replicas = 1;     // 0..1000
  std::optional<int64_t> ttl_seconds;
  std::optional<std::string> expires_at;
  std::map<std::string, std::string> child_labels, child_annotations;  // childMetadata
};

struct SandboxForkStatus {
  Json conditions = Json::array();
};

struct SandboxForkView {
  Json object;
  ObjectMeta meta;
  SandboxForkSpec spec;
  SandboxForkStatus status;
  std::vector<std::string> problems;  // of the spec

  static SandboxForkView Parse(Json object);
};

// --- Workspace -----------------------------------------------------------

struct WorkspaceSpec {
  std::optional<int64_t> size_mib;       // sizeMiB
  std::optional<std::string> node_name;  // nodeName: a pin
};

// status.disk: the node daemon's report of the disk.
struct WorkspaceDisk {
  std::string state;  // Ready, Failed, Deleted; "" = no report
  std::string message, attached_to;
  std::optional<int64_t> bytes_used;
};

struct WorkspaceStatus {
  std::string phase, node_name, token_secret_name, token_sha256, attached_to;
  WorkspaceDisk disk;
  Json conditions = Json::array();
};

struct WorkspaceView {
  Json object;
  ObjectMeta meta;
  WorkspaceSpec spec;
  WorkspaceStatus status;
  std::vector<std::string> problems;  // of the spec

  static WorkspaceView Parse(Json object);
};

// "a; b; c" for status messages.
std::string JoinProblems(const std::vector<std::string>& problems);

}  // namespace kubicle::op
