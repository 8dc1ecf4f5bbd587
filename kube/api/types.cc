#include "kube/api/types.h"

#include <algorithm>

#include "kube/api/names.h"
#include "kube/json_fields.h"
#include "kube/time_format.h"

namespace kubicle::kube::api {

namespace {

constexpr int64_t kMaxSeconds = 100LL * 366 * 86400;  // far past any schema, no overflow
constexpr int64_t kMaxMib = int64_t{1} << 30;           // 1 PiB
constexpr int64_t kMaxReplicas = 1000;

const Json& EmptyObject() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

// Typed reads of one object's fields that name each field present with the
// wrong type in `problems` (when not null), prefixed with the object's path.
// With `reads` set, every field asked for is recorded (RecordReads).
class Fields {
 public:
  Fields(const Json& v, std::string path, std::vector<std::string>* problems,
         std::vector<FieldRead>* reads = nullptr)
      : v_(v), path_(std::move(path)), problems_(problems), reads_(reads) {}
  // The same reads of `v` (an item of an array read here) with problems
  // named under `path`.
  Fields Item(const Json& v, std::string path) const { return Fields(v, std::move(path), problems_, reads_); }
  // The same reads, but problems not recorded (status, node reports).
  Fields Quiet() const { return Fields(v_, path_, nullptr, reads_); }

  // The object at `key`; absent or of another type: an empty one.
  Fields Object(std::string_view key) const {
    Read(key, "object");
    const Json& v = Get(key);
    if (!v.is_null() && !v.is_object()) Problem(key, "an object", v);
    return Fields(v.is_object() ? v : Null(), Path(key), problems_, reads_);
  }
  std::optional<std::string> String(std::string_view key) const {
    Read(key, "string");
    const Json& v = Get(key);
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_null()) Problem(key, "a string", v);
    return std::nullopt;
  }
  std::optional<bool> Bool(std::string_view key) const {
    Read(key, "boolean");
    const Json& v = Get(key);
    if (v.is_boolean()) return v.get<bool>();
    if (!v.is_null()) Problem(key, "a boolean", v);
    return std::nullopt;
  }
  std::optional<int64_t> Int(std::string_view key, int64_t min = INT64_MIN, int64_t max = INT64_MAX) const {
    Read(key, "integer");
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
    Read(key, "array");
    static const Json kEmpty = Json::array();
    const Json& v = Get(key);
    if (v.is_array()) return v;
    if (!v.is_null()) Problem(key, "an array", v);
    return kEmpty;
  }
  // A map of strings (labels, annotations); entries of another type dropped.
  std::map<std::string, std::string> StringMap(std::string_view key) const {
    Read(key, "map");
    std::map<std::string, std::string> out;
    Fields m = Fields(v_, path_, problems_).Object(key);
    for (const auto& [k, v] : m.v_.items()) {
      if (v.is_string()) {
        out[k] = v.get<std::string>();
      } else if (!v.is_null()) {
        m.Problem(k, "a string", v);
      }
    }
    return out;
  }
  // A number of any kind (integer or not) as a double; other types: 0.
  double Number(std::string_view key) const {
    Read(key, "number");
    return NumAt(v_, {key});
  }
  // The value as written (null when absent), whatever its type.
  Json Any(std::string_view key) const {
    Read(key, "any");
    return Get(key);
  }
  // Items of the array at `key` are read as `type`.
  void ItemsAre(std::string_view key, const char* type) const { Read(std::string(key) + "[]", type); }
  // Whether `key` holds an object (read as one).
  bool HasObject(std::string_view key) const {
    Read(key, "object");
    return Get(key).is_object();
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
  // Array indices become "[]": one path per field, whatever the item.
  void Read(std::string_view key, const char* type) const {
    if (!reads_) return;
    std::string path;
    const std::string full = Path(key);
    for (size_t i = 0; i < full.size(); ++i) {
      path += full[i];
      if (full[i] != '[') continue;
      while (i + 1 < full.size() && full[i + 1] != ']') ++i;
    }
    reads_->push_back({path, type});
  }

  const Json& v_;
  std::string path_;
  std::vector<std::string>* problems_;
  std::vector<FieldRead>* reads_;
};

// Object entries of status.conditions; anything else is dropped (the
// operator owns the list and rewrites it).
Json Conditions(const Fields& status) {
  Json out = Json::array();
  for (const Json& c : status.Array("conditions")) {
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

std::optional<Condition> FindCondition(const Json& conditions, std::string_view type) {
  if (!conditions.is_array()) return std::nullopt;
  for (const Json& c : conditions) {
    if (!c.is_object() || StrAt(c, {"type"}) != type) continue;
    return Condition{StrAt(c, {"type"}), StrAt(c, {"status"}), StrAt(c, {"reason"}),
                     StrAt(c, {"message"})};
  }
  return std::nullopt;
}

// --- Sandbox -------------------------------------------------------------

namespace {

SandboxSpec ParseSandboxSpec(const Fields& root) {
  SandboxSpec s;
  const Fields spec = root.Object("spec");
  s.template_name = spec.Object("templateRef").String("name").value_or("");
  s.ttl_seconds = spec.Int("ttlSeconds", 0, kMaxSeconds);
  s.expires_at = spec.String("expiresAt");
  s.fork_source = spec.String("forkSource");
  s.suspend = spec.Bool("suspend").value_or(false);
  Fields resources = spec.Object("resources");
  s.memory_mib = resources.Int("memoryMiB", 1, kMaxMib);
  s.vcpus = resources.Int("vcpus", 1, 1024);
  s.workspace = spec.Object("workspaceRef").String("name");
  s.token_sha256 = spec.String("tokenSha256");
  const Json& env = spec.Array("env");
  const Fields none = spec.Item(EmptyObject(), spec.Path("env[]")).Quiet();
  (void)none.String("name"), (void)none.String("value");  // the reads below, recorded
  for (const Json& e : env) {
    if (e.is_object()) s.env.emplace_back(StrAt(e, {"name"}), StrAt(e, {"value"}));
  }
  s.network = spec.Any("network");
  return s;
}

SandboxStatus ParseSandboxStatus(const Fields& root) {
  SandboxStatus status;
  const Fields st = root.Quiet().Object("status");
  status.phase = st.String("phase").value_or("");
  status.node_name = st.String("nodeName").value_or("");
  status.expires_at = st.String("expiresAt").value_or("");
  status.token_secret_name = st.String("tokenSecretName").value_or("");
  status.token_sha256 = st.String("tokenSha256").value_or("");
  status.has_vm = st.HasObject("vm");
  const Fields vm = st.Object("vm");
  status.vm = {vm.String("state").value_or(""), vm.String("endpoint").value_or(""),
               vm.String("message").value_or(""), vm.Number("restoreMillis")};
  status.conditions = Conditions(st);
  return status;
}

SandboxView ParseSandbox(Json object, std::vector<FieldRead>* reads) {
  SandboxView v;
  v.meta = ParseObjectMeta(object);
  const Fields root(object, "", &v.problems, reads);
  v.spec = ParseSandboxSpec(root);
  v.status = ParseSandboxStatus(root);
  v.object = std::move(object);
  return v;
}

}  // namespace

SandboxSpec ParseSandboxSpec(const Json& sandbox, std::vector<std::string>* problems) {
  return ParseSandboxSpec(Fields(sandbox, "", problems));
}

SandboxStatus ParseSandboxStatus(const Json& sandbox) { return ParseSandboxStatus(Fields(sandbox, "", nullptr)); }

SandboxView SandboxView::Parse(Json object) { return ParseSandbox(std::move(object), nullptr); }

Json SandboxVmStatusPatch(const SandboxVm& r, TimePoint now) {
  // Merge patch: null removes a field a previous state set.
  Json vm = {{"state", r.state}, {"lastUpdateTime", FormatTime(now)},
             {"endpoint", r.endpoint.empty() ? Json() : Json(r.endpoint)},
             {"message", r.message.empty() ? Json() : Json(r.message)},
             {"restoreMillis", r.restore_millis > 0 ? Json(r.restore_millis) : Json()}};
  return {{"status", {{"vm", vm}}}};
}

Json SandboxSuspendPatch(bool suspend) { return {{"spec", {{"suspend", suspend}}}}; }

// --- SandboxTemplate -----------------------------------------------------

namespace {

SandboxTemplateSpec ParseSandboxTemplateSpec(const Fields& root) {
  SandboxTemplateSpec s;
  const Fields spec = root.Object("spec");
  s.image = spec.String("image");
  s.kernel = spec.String("kernel");
  s.initrd = spec.String("initrd");
  s.rootfs = spec.String("rootfs");
  s.kernel_sha256 = spec.String("kernelSha256");
  s.initrd_sha256 = spec.String("initrdSha256");
  s.rootfs_sha256 = spec.String("rootfsSha256");
  s.kernel_args = spec.String("kernelArgs");
  s.memory_mib = spec.Int("memoryMiB", 1, kMaxMib);
  // Read for the node (bounds are the schema's and the node's business).
  s.vcpus = spec.Int("vcpus");
  s.capacity_hint = spec.Int("capacityHint");
  s.network = spec.Any("network");
  const Json& warmup = spec.Array("warmup");
  // Reads of an item recorded even when there is none (RecordReads).
  const size_t items = std::max<size_t>(warmup.size(), 1);
  for (size_t i = 0; i < items; ++i) {
    const std::string path = "spec.warmup[" + std::to_string(i) + "]";
    const Json& item = i < warmup.size() ? warmup[i] : EmptyObject();
    const Fields step = spec.Item(item.is_object() ? item : EmptyObject(), path);
    if (i < warmup.size() && !item.is_object()) {
      step.Note(path + ": expected an object, got " + item.type_name());
    }
    WarmupStep w;
    const Json& argv = step.Array("command");
    step.ItemsAre("command", "string");
    for (size_t j = 0; j < argv.size(); ++j) {
      if (argv[j].is_string()) {
        w.command.push_back(argv[j].get<std::string>());
        continue;
      }
      step.Note(step.Path("command") + "[" + std::to_string(j) + "]: expected a string, got " +
                argv[j].type_name());
      w.command.emplace_back();
    }
    w.timeout_seconds = step.Int("timeoutSeconds");
    if (i < warmup.size()) s.warmup.push_back(std::move(w));
  }
  return s;
}

SandboxTemplateView ParseSandboxTemplate(Json object, std::vector<FieldRead>* reads) {
  SandboxTemplateView v;
  v.meta = ParseObjectMeta(object);
  const Fields root(object, "", &v.problems, reads);
  v.spec = ParseSandboxTemplateSpec(root);
  const Fields st = root.Quiet().Object("status");
  const Json& nodes = st.Array("nodes");
  const size_t items = std::max<size_t>(nodes.size(), 1);
  for (size_t i = 0; i < items; ++i) {
    const Json& e = i < nodes.size() ? nodes[i] : EmptyObject();
    const Fields n = st.Item(e.is_object() ? e : EmptyObject(), "status.nodes[]");
    TemplateNodeEntry entry;
    entry.node_name = n.String("nodeName").value_or("");
    entry.phase = n.String("phase").value_or("");
    entry.observed_generation = n.Int("observedGeneration").value_or(0);
    entry.message = n.String("message").value_or("");
    entry.snapshot_digest = n.String("snapshotDigest").value_or("");
    entry.bake_seconds = n.Number("bakeSeconds");
    entry.endpoint = n.String("endpoint").value_or("");
    entry.node_template = n.String("nodeTemplate").value_or("");
    entry.image_digest = n.String("imageDigest").value_or("");
    if (i < nodes.size() && !entry.node_name.empty()) v.status.nodes.push_back(std::move(entry));
  }
  v.status.run_token_sha256 = st.String("runTokenSha256").value_or("");
  v.status.run_token_secret_name = st.String("runTokenSecretName").value_or("");
  v.status.conditions = Conditions(st);
  v.object = std::move(object);
  return v;
}

}  // namespace

SandboxTemplateSpec ParseSandboxTemplateSpec(const Json& tmpl, std::vector<std::string>* problems) {
  return ParseSandboxTemplateSpec(Fields(tmpl, "", problems));
}

SandboxTemplateView SandboxTemplateView::Parse(Json object) {
  return ParseSandboxTemplate(std::move(object), nullptr);
}

std::optional<TemplateNodeReport> SandboxTemplateStatus::NodeReport(std::string_view node) const {
  for (const TemplateNodeEntry& e : nodes) {
    if (e.node_name == node) return e;
  }
  return std::nullopt;
}

Json TemplateNodeEntryJson(std::string_view node, const TemplateNodeReport& r, TimePoint now) {
  Json e = {{"nodeName", node}, {"phase", r.phase}, {"observedGeneration", r.observed_generation},
            {"lastUpdateTime", FormatTime(now)}};
  if (!r.message.empty()) e["message"] = r.message;
  if (!r.snapshot_digest.empty()) e["snapshotDigest"] = r.snapshot_digest;
  if (r.phase == "Ready") e["bakeSeconds"] = r.bake_seconds;
  if (!r.endpoint.empty()) e["endpoint"] = r.endpoint;
  if (!r.node_template.empty()) e["nodeTemplate"] = r.node_template;
  if (!r.image_digest.empty()) e["imageDigest"] = r.image_digest;
  return e;
}

// --- SandboxFork ---------------------------------------------------------

namespace {

SandboxForkSpec ParseSandboxForkSpec(const Fields& root) {
  SandboxForkSpec s;
  const Fields spec = root.Object("spec");
  s.source_name = spec.Object("sourceRef").String("name").value_or("");
  s.replicas = spec.Int("replicas", 0, kMaxReplicas).value_or(1);
  s.ttl_seconds = spec.Int("ttlSeconds", 0, kMaxSeconds);
  s.expires_at = spec.String("expiresAt");
  Fields child = spec.Object("childMetadata");
  s.child_labels = child.StringMap("labels");
  s.child_annotations = child.StringMap("annotations");
  const Json& hashes = spec.Array("childTokenSha256");
  spec.ItemsAre("childTokenSha256", "string");
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (!hashes[i].is_string()) {
      spec.Note(spec.Path("childTokenSha256") + "[" + std::to_string(i) +
                "]: expected a string, got " + hashes[i].type_name());
    }
    s.child_token_sha256.push_back(hashes[i].is_string() ? hashes[i].get<std::string>() : "");
  }
  return s;
}

SandboxForkView ParseSandboxFork(Json object, std::vector<FieldRead>* reads) {
  SandboxForkView v;
  v.meta = ParseObjectMeta(object);
  const Fields root(object, "", &v.problems, reads);
  v.spec = ParseSandboxForkSpec(root);
  v.status.conditions = Conditions(root.Quiet().Object("status"));
  v.object = std::move(object);
  return v;
}

// --- Workspace -----------------------------------------------------------

WorkspaceView ParseWorkspace(Json object, std::vector<FieldRead>* reads) {
  WorkspaceView v;
  v.meta = ParseObjectMeta(object);
  const Fields root(object, "", &v.problems, reads);
  const Fields spec = root.Object("spec");
  v.spec.size_mib = spec.Int("sizeMiB", 1, kMaxMib);
  v.spec.node_name = spec.String("nodeName");
  if (!v.spec.size_mib && v.problems.empty()) v.problems.push_back("spec.sizeMiB: required");
  const Fields st = root.Quiet().Object("status");
  v.status.phase = st.String("phase").value_or("");
  v.status.node_name = st.String("nodeName").value_or("");
  v.status.token_secret_name = st.String("tokenSecretName").value_or("");
  v.status.token_sha256 = st.String("tokenSha256").value_or("");
  v.status.attached_to = st.String("attachedTo").value_or("");
  v.status.has_disk = st.HasObject("disk");
  const Fields disk = st.Object("disk");
  v.status.disk.state = disk.String("state").value_or("");
  v.status.disk.id = disk.String("id").value_or("");
  v.status.disk.endpoint = disk.String("endpoint").value_or("");
  v.status.disk.attached_to = disk.String("attachedTo").value_or("");
  v.status.disk.message = disk.String("message").value_or("");
  v.status.disk.bytes_used = disk.Int("bytesUsed");
  v.status.conditions = Conditions(st);
  v.object = std::move(object);
  return v;
}

}  // namespace

SandboxForkSpec ParseSandboxForkSpec(const Json& fork, std::vector<std::string>* problems) {
  return ParseSandboxForkSpec(Fields(fork, "", problems));
}

Json NewSandboxFork(std::string_view name, const std::map<std::string, std::string>& labels,
                    const SandboxForkSpec& spec) {
  Json s = {{"sourceRef", {{"name", spec.source_name}}}, {"replicas", spec.replicas}};
  if (spec.ttl_seconds) s["ttlSeconds"] = *spec.ttl_seconds;
  if (spec.expires_at) s["expiresAt"] = *spec.expires_at;
  Json child = Json::object();
  if (!spec.child_labels.empty()) child["labels"] = spec.child_labels;
  if (!spec.child_annotations.empty()) child["annotations"] = spec.child_annotations;
  if (!child.empty()) s["childMetadata"] = std::move(child);
  if (!spec.child_token_sha256.empty()) s["childTokenSha256"] = spec.child_token_sha256;
  return {{"apiVersion", kGroupVersion},
          {"kind", "SandboxFork"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"spec", std::move(s)}};
}

SandboxForkView SandboxForkView::Parse(Json object) { return ParseSandboxFork(std::move(object), nullptr); }

WorkspaceView WorkspaceView::Parse(Json object) { return ParseWorkspace(std::move(object), nullptr); }

Json WorkspaceDiskStatusPatch(const WorkspaceDisk& d, TimePoint now) {
  auto or_null = [](const std::string& s) { return s.empty() ? Json() : Json(s); };
  Json disk = {{"state", d.state}, {"lastUpdateTime", FormatTime(now)},
               {"id", or_null(d.id)}, {"endpoint", or_null(d.endpoint)},
               {"attachedTo", or_null(d.attached_to)}, {"message", or_null(d.message)},
               {"bytesUsed", d.bytes_used ? Json(*d.bytes_used) : Json()}};
  return {{"status", {{"disk", disk}}}};
}

std::string NodeLeaseServingCa(const Json& lease) {
  return StrAt(At(lease, {"metadata", "annotations"}), {kAnnotationServingCa});
}

std::string JoinProblems(const std::vector<std::string>& problems) {
  std::string out;
  for (const std::string& p : problems) out += (out.empty() ? "" : "; ") + p;
  return out;
}

void RecordReads(std::string_view kind, const Json& object, std::vector<FieldRead>* reads) {
  if (kind == "Sandbox") (void)ParseSandbox(object, reads);
  if (kind == "SandboxTemplate") (void)ParseSandboxTemplate(object, reads);
  if (kind == "SandboxFork") (void)ParseSandboxFork(object, reads);
  if (kind == "Workspace") (void)ParseWorkspace(object, reads);
}

}  // namespace kubicle::kube::api
