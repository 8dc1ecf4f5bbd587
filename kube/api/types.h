// The Kubernetes contract of group kubicle.dev: typed views of every kind
// (Sandbox, SandboxTemplate, SandboxFork, Workspace; fields in docs/api.md),
// parsed once from the unstructured JSON an informer cache or the client
// hands out, and the status parts the node agent writes. The operator, the
// node agent and the plugin read these objects through this file only, so
// reconcilers, node syncs and the pure status functions read fields instead
// of JSON paths. crd_schema_test holds these types and crds/ to each other.
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
#include <tuple>
#include <utility>
#include <vector>

#include "kube/clock.h"
#include "kube/kube_client.h"

namespace kubicle::kube::api {

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

// One entry of status.conditions, as every kind has them.
struct Condition {
  std::string type, status, reason, message;  // "" when absent
};
// The entry of `type` in `conditions` (a status's parsed list), if any.
std::optional<Condition> FindCondition(const Json& conditions, std::string_view type);

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
  // spec.tokenSha256: the client's own token, as its hash (no Secret). As
  // written: the CRD refuses anything but 64 lowercase hex, and the
  // operator checks again.
  std::optional<std::string> token_sha256;
  // env[]: entries that are not objects are dropped; a name or value that
  // is not a string reads as "". Its shape is not a problem of the spec
  // (fork children copy env verbatim from the object: DesiredForkChild).
  std::vector<std::pair<std::string, std::string>> env;
  // spec.network as written (null when absent): the CRD keeps egress
  // free-form and the node parses it strictly (network::ParseNetworkSpec).
  Json network;
};
// `problems` may be null (not recorded).
SandboxSpec ParseSandboxSpec(const Json& sandbox, std::vector<std::string>* problems);

// status.vm: the node daemon's report of the VM.
struct SandboxVm {
  std::string state;  // Restoring, Forking, Waiting, Running, Suspended, Failed, Terminated
  std::string endpoint;  // host:port of the node's data plane, while Running
  std::string message;
  double restore_millis = 0;
  bool operator==(const SandboxVm&) const = default;
};
// The merge patch of status.vm the node writes: null removes what a
// previous state set; lastUpdateTime is `now`.
Json SandboxVmStatusPatch(const SandboxVm& vm, TimePoint now);
// The merge patch of spec.suspend a client writes to suspend or resume.
Json SandboxSuspendPatch(bool suspend);

struct SandboxStatus {
  std::string phase, node_name, expires_at, token_secret_name, token_sha256;
  bool has_vm = false;  // status.vm is an object
  SandboxVm vm;         // all empty without a report
  Json conditions = Json::array();  // object entries only
};

// Without copying the object (filters over an informer cache).
SandboxStatus ParseSandboxStatus(const Json& sandbox);

struct SandboxView {
  Json object;
  ObjectMeta meta;
  SandboxSpec spec;
  SandboxStatus status;
  std::vector<std::string> problems;  // of the spec

  static SandboxView Parse(Json object);
};

// --- SandboxTemplate -----------------------------------------------------

struct WarmupStep {
  std::vector<std::string> command;  // an item that is not a string reads as ""
  std::optional<int64_t> timeout_seconds;
};

struct SandboxTemplateSpec {
  // image (an OCI reference) or rootfs, exactly one (CEL; the operator
  // checks again); kernel absent: the node's default guest kernel.
  std::optional<std::string> image;
  std::optional<std::string> kernel, initrd, rootfs;
  std::optional<std::string> kernel_sha256, initrd_sha256, rootfs_sha256;
  std::optional<std::string> kernel_args;
  std::optional<int64_t> memory_mib, vcpus, capacity_hint;
  std::vector<WarmupStep> warmup;
  Json network;  // as written, null when absent (see SandboxSpec::network)
};
SandboxTemplateSpec ParseSandboxTemplateSpec(const Json& tmpl, std::vector<std::string>* problems);

// What one node daemon reports of a template in its status.nodes[] entry.
struct TemplateNodeReport {
  std::string phase;  // Baking, Ready, Failed
  int64_t observed_generation = 0;
  std::string message;  // why, when Failed; progress while Baking
  std::string snapshot_digest;
  double bake_seconds = 0;
  // While Ready: where and under which name clients run it (per-call runs).
  std::string endpoint;
  std::string node_template;
  // spec.image templates: the manifest digest the node baked.
  std::string image_digest;
  bool operator==(const TemplateNodeReport&) const = default;
};
// One entry of status.nodes[].
struct TemplateNodeEntry : TemplateNodeReport {
  std::string node_name;
};
// The status.nodes[] entry `node` applies (server-side apply, one field
// manager per node): empty fields left out, lastUpdateTime `now`.
Json TemplateNodeEntryJson(std::string_view node, const TemplateNodeReport& report, TimePoint now);

struct SandboxTemplateStatus {
  std::vector<TemplateNodeEntry> nodes;  // entries without a nodeName dropped
  std::string run_token_sha256, run_token_secret_name;
  Json conditions = Json::array();

  // The entry of `node`, if any.
  std::optional<TemplateNodeReport> NodeReport(std::string_view node) const;
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
  // childTokenSha256[]: child i's spec.tokenSha256 (its client's own token,
  // as its hash), as written; an item that is not a string reads as "".
  std::vector<std::string> child_token_sha256;
};

struct SandboxForkStatus {
  Json conditions = Json::array();
};

// `problems` may be null (not recorded).
SandboxForkSpec ParseSandboxForkSpec(const Json& fork, std::vector<std::string>* problems);
// A new SandboxFork object named `name` with `labels`: every field of
// `spec` that is set (childMetadata only when it has entries), so that
// ParseSandboxForkSpec reads `spec` back.
Json NewSandboxFork(std::string_view name, const std::map<std::string, std::string>& labels,
                    const SandboxForkSpec& spec);

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
  std::string id, endpoint, attached_to, message;
  std::optional<int64_t> bytes_used;
  bool operator==(const WorkspaceDisk&) const = default;
};
// The merge patch of status.disk the node writes (null removes a field).
Json WorkspaceDiskStatusPatch(const WorkspaceDisk& disk, TimePoint now);

struct WorkspaceStatus {
  std::string phase, node_name, token_secret_name, token_sha256, attached_to;
  bool has_disk = false;  // status.disk is an object
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

// --- Node Leases (docs/operator.md, "Node protocol") ---------------------

// The CA (PEM) a node's heartbeat Lease publishes for its data plane's
// serving certificate; "" when it publishes none (plain HTTP).
std::string NodeLeaseServingCa(const Json& lease);

// "a; b; c" for status messages.
std::string JoinProblems(const std::vector<std::string>& problems);

// One field a parse read, with the JSON type it asked for ("string",
// "integer", "number", "boolean", "object", "array", "map" of strings, or
// "any"); array items as "[]". For crd_schema_test: what the types read is
// what the CRD holds.
struct FieldRead {
  std::string path;  // "spec.env[].name"
  std::string type;
  bool operator<(const FieldRead& o) const { return std::tie(path, type) < std::tie(o.path, o.type); }
};
// Parses `object` as `kind` ("Sandbox", ...) recording every field read.
void RecordReads(std::string_view kind, const Json& object, std::vector<FieldRead>* reads);

}  // namespace kubicle::kube::api
