#include "operator/views.h"

#include <algorithm>

#include "kube/json_fields.h"

namespace kubicle::op {

using kube::At;
using kube::IntAt;
using kube::StrAt;

namespace {

constexpr int64_t kMaxSeconds = 100LL * 366 * 86400;  // far past any schema, no overflow
constexpr int64_t kMaxMib = int64_t{1} << 30;           // 1 PiB
constexpr int64_t kMaxReplicas = 1000;

// Typed reads of one object's fields that name each field present with the
// wrong type in `problems` (when not null), prefixed with the object's path.
class Fields {
 public:
  Fields(const Json& v, std::string path, std::vector<std::string>* problems)
      : v_(v), path_(std::move(path)), problems_(problems) {}

  // The object at `key`; absent or of another type: an empty one.
  Fields Object(std::string_view key) const {
    const Json& v = Get(key);
    if (!v.is_null() && !v.is_object()) Problem(key, "an object", v);
    return Fields(v.is_object() ? v : Null(), Path(key), problems_);
  }
  std::optional<std::string> String(std::string_view key) const {
    const Json& v = Get(key);
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_null()) Problem(key, "a string", v);
    return std::nullopt;
  }
  std::optional<bool> Bool(std::string_view key) const {
    const Json& v = Get(key);
    if (v.is_boolean()) return v.get<bool>();
    if (!v.is_null()) Problem(key, "a boolean", v);
    return std::nullopt;
  }
  std::optional<int64_t> Int(std::string_view key, int64_t min, int64_t max) const {
    const Json& v = Get(key);
    if (v.is_null()) return std::nullopt;
    if (!kube::IsInt64(v)) {
      Problem(key, "an integer", v);
      return std::nullopt;
    }
    const int64_t n = v.get<int64_t>();
    if (n < min || n > max) {
      Note(Path(key) + ": " + std::to_string(n) + " is outside [" + std::to_string(min) + ", " +
           std::to_string(max) + "]");
      return std::nullopt;
    }
    return n;
  }
  // The array at `key`; absent or of another type: an empty one.
  const Json& Array(std::string_view key) const {
    static const Json kEmpty = Json::array();
    const Json& v = Get(key);
    if (v.is_array()) return v;
    if (!v.is_null()) Problem(key, "an array", v);
    return kEmpty;
  }
  // A map of strings (labels, annotations); entries of another type dropped.
  std::map<std::string, std::string> StringMap(std::string_view key) const {
    std::map<std::string, std::string> out;
    Fields m = Object(key);
    for (const auto& [k, v] : m.v_.items()) {
      if (v.is_string()) {
        out[k] = v.get<std::string>();
      } else if (!v.is_null()) {
        m.Problem(k, "a string", v);
      }
    }
    return out;
  }
  std::string Path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  void Note(std::string problem) const {
    if (problems_) problems_->push_back(std::move(problem));
  }

 private:
  static const Json& Null() {
    static const Json kNull;
    return kNull;
  }
  const Json& Get(std::string_view key) const { return At(v_, {key}); }
  void Problem(std::string_view key, const char* want, const Json& got) const {
    Note(Path(key) + ": expected " + want + ", got " + got.type_name());
  }

  const Json& v_;
  std::string path_;
  std::vector<std::string>* problems_;
};

// Object entries of status.conditions; anything else is dropped (the
// operator owns the list and rewrites it).
Json Conditions(const Json& obj) {
  Json out = Json::array();
  const Json& list = At(obj, {"status", "conditions"});
  if (!list.is_array()) return out;
  for (const Json& c : list) {
    if (c.is_object()) out.push_back(c);
  }
  return out;
}

}  // namespace

std::string ObjectMeta::Label(std::string_view key) const {
  auto it = labels.find(std::string(key));
  return it == labels.end() ? "" : it->second;
}

bool ObjectMeta::HasFinalizer(std::string_view finalizer) const {
  return std::find(finalizers.begin(), finalizers.end(), finalizer) != finalizers.end();
}

std::string ObjectMeta::Key() const { return kube::ObjectKey(ns, name); }

ObjectMeta ParseObjectMeta(const Json& obj) {
  ObjectMeta m;
  const Json& md = At(obj, {"metadata"});
  m.name = StrAt(md, {"name"});
  m.ns = StrAt(md, {"namespace"});
  m.uid = StrAt(md, {"uid"});
  m.resource_version = StrAt(md, {"resourceVersion"});
  m.creation_timestamp = StrAt(md, {"creationTimestamp"});
  m.generation = IntAt(md, {"generation"});
  m.deleting = !At(md, {"deletionTimestamp"}).is_null();
  m.labels = Fields(md, "metadata", nullptr).StringMap("labels");
  const Json& finalizers = At(md, {"finalizers"});
  if (finalizers.is_array()) {
    for (const Json& f : finalizers) {
      if (f.is_string()) m.finalizers.push_back(f.get<std::string>());
    }
  }
  return m;
}

// --- Sandbox -------------------------------------------------------------

SandboxSpec ParseSandboxSpec(const Json& sandbox, std::vector<std::string>* problems) {
  SandboxSpec s;
  const Fields spec = Fields(sandbox, "", problems).Object("spec");
  s.template_name = spec.Object("templateRef").String("name").value_or("");
  s.ttl_seconds = spec.Int("ttlSeconds", 0, kMaxSeconds);
  s.expires_at = spec.String("expiresAt");
  s.fork_source = spec.String("forkSource");
  s.suspend = spec.Bool("suspend").value_or(false);
  Fields resources = spec.Object("resources");
  s.memory_mib = resources.Int("memoryMiB", 1, kMaxMib);
  s.vcpus = resources.Int("vcpus", 1, 1024);
  s.workspace = spec.Object("workspaceRef").String("name");
  (void)spec.Array("env");  // shape only (see views.h)
  return s;
}

SandboxView SandboxView::Parse(Json object) {
  SandboxView v;
  v.meta = ParseObjectMeta(object);
  v.spec = ParseSandboxSpec(object, &v.problems);
  const Json& st = At(object, {"status"});
  v.status.phase = StrAt(st, {"phase"});
  v.status.node_name = StrAt(st, {"nodeName"});
  v.status.expires_at = StrAt(st, {"expiresAt"});
  v.status.token_secret_name = StrAt(st, {"tokenSecretName"});
  v.status.token_sha256 = StrAt(st, {"tokenSha256"});
  v.status.vm_state = StrAt(st, {"vm", "state"});
  v.status.vm_message = StrAt(st, {"vm", "message"});
  v.status.conditions = Conditions(object);
  v.object = std::move(object);
  return v;
}

// --- SandboxTemplate -----------------------------------------------------

SandboxTemplateSpec ParseSandboxTemplateSpec(const Json& tmpl, std::vector<std::string>* problems) {
  SandboxTemplateSpec s;
  const Fields spec = Fields(tmpl, "", problems).Object("spec");
  s.kernel = spec.String("kernel");
  s.initrd = spec.String("initrd");
  s.rootfs = spec.String("rootfs");
  s.memory_mib = spec.Int("memoryMiB", 1, kMaxMib);
  const Json& warmup = spec.Array("warmup");
  for (size_t i = 0; i < warmup.size(); ++i) {
    const Fields step(warmup[i], "spec.warmup[" + std::to_string(i) + "]", problems);
    if (!warmup[i].is_object()) {
      step.Note("spec.warmup[" + std::to_string(i) + "]: expected an object, got " +
                warmup[i].type_name());
    }
    std::vector<std::string> command;
    const Json& argv = step.Array("command");
    for (size_t j = 0; j < argv.size(); ++j) {
      if (argv[j].is_string()) {
        command.push_back(argv[j].get<std::string>());
        continue;
      }
      step.Note(step.Path("command") + "[" + std::to_string(j) + "]: expected a string, got " +
                argv[j].type_name());
      command.emplace_back();
    }
    s.warmup_commands.push_back(std::move(command));
  }
  return s;
}

SandboxTemplateView SandboxTemplateView::Parse(Json object) {
  SandboxTemplateView v;
  v.meta = ParseObjectMeta(object);
  v.spec = ParseSandboxTemplateSpec(object, &v.problems);
  const Json& nodes = At(object, {"status", "nodes"});
  if (nodes.is_array()) {
    for (const Json& e : nodes) {
      TemplateNodeEntry n{StrAt(e, {"nodeName"}), StrAt(e, {"phase"}),
                          IntAt(e, {"observedGeneration"}), StrAt(e, {"message"})};
      if (!n.node_name.empty()) v.status.nodes.push_back(std::move(n));
    }
  }
  v.status.conditions = Conditions(object);
  v.object = std::move(object);
  return v;
}

// --- SandboxFork ---------------------------------------------------------

SandboxForkView SandboxForkView::Parse(Json object) {
  SandboxForkView v;
  v.meta = ParseObjectMeta(object);
  const Fields spec = Fields(object, "", &v.problems).Object("spec");
  v.spec.source_name = spec.Object("sourceRef").String("name").value_or("");
  v.spec.replicas = spec.Int("replicas", 0, kMaxReplicas).value_or(1);
  v.spec.ttl_seconds = spec.Int("ttlSeconds", 0, kMaxSeconds);
  v.spec.expires_at = spec.String("expiresAt");
  Fields child = spec.Object("childMetadata");
  v.spec.child_labels = child.StringMap("labels");
  v.spec.child_annotations = child.StringMap("annotations");
  v.status.conditions = Conditions(object);
  v.object = std::move(object);
  return v;
}

// --- Workspace -----------------------------------------------------------

WorkspaceView WorkspaceView::Parse(Json object) {
  WorkspaceView v;
  v.meta = ParseObjectMeta(object);
  const Fields spec = Fields(object, "", &v.problems).Object("spec");
  v.spec.size_mib = spec.Int("sizeMiB", 1, kMaxMib);
  v.spec.node_name = spec.String("nodeName");
  if (!v.spec.size_mib && v.problems.empty()) v.problems.push_back("spec.sizeMiB: required");
  const Json& st = At(object, {"status"});
  v.status.phase = StrAt(st, {"phase"});
  v.status.node_name = StrAt(st, {"nodeName"});
  v.status.token_secret_name = StrAt(st, {"tokenSecretName"});
  v.status.token_sha256 = StrAt(st, {"tokenSha256"});
  v.status.attached_to = StrAt(st, {"attachedTo"});
  const Json& disk = At(st, {"disk"});
  v.status.disk.state = StrAt(disk, {"state"});
  v.status.disk.message = StrAt(disk, {"message"});
  v.status.disk.attached_to = StrAt(disk, {"attachedTo"});
  if (kube::IsInt64(At(disk, {"bytesUsed"}))) v.status.disk.bytes_used = IntAt(disk, {"bytesUsed"});
  v.status.conditions = Conditions(object);
  v.object = std::move(object);
  return v;
}

std::string JoinProblems(const std::vector<std::string>& problems) {
  std::string out;
  for (const std::string& p : problems) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace kubicle::op
