#include "noderuntime/state/records.h"

#include <type_traits>

#include "common/json_number.h"

namespace kubicle::noderuntime {
namespace {

using nlohmann::json;

int64_t ToMs(WallTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
WallTime FromMs(int64_t ms) { return WallTime(std::chrono::milliseconds(ms)); }

// Typed field access that reports the field instead of throwing.
class Reader {
 public:
  explicit Reader(const json& j) : j_(j) {}
  template <typename T>
  void Get(const char* key, T* out, bool required = true) {
    if (!status_.ok()) return;
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) status_ = Status::DataLoss(std::string("record: missing \"") + key + "\"");
      return;
    }
    try {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        *out = IntegerFromJson<T>(*it);  // a float or out-of-range number is no cast
      } else {
        *out = it->template get<T>();
      }
    } catch (const json::exception&) {
      status_ = Status::DataLoss(std::string("record: bad \"") + key + "\"");
    }
  }
  bool Has(const char* key) const { return j_.contains(key); }
  const Status& status() const { return status_; }

 private:
  const json& j_;
  Status status_;
};

Result<json> ParseObject(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss("record is not a JSON object");
  auto version = j.find("version");
  if (version == j.end() || *version != 1) return Status::DataLoss("record: unknown version");
  return j;
}

// A record's "network": what the node needs to find the namespace again.
Result<SandboxNetworkInfo> DecodeNetwork(const json& j) {
  if (!j.is_object()) return Status::DataLoss("record: bad \"network\"");
  SandboxNetworkInfo n;
  json policy;
  Reader rd(j);
  rd.Get("netns", &n.netns);
  rd.Get("slot", &n.slot);
  rd.Get("mac", &n.mac);
  rd.Get("policy", &policy);
  if (!rd.status().ok()) return Status::DataLoss(rd.status().message() + " in \"network\"");
  if (n.netns.empty() || n.netns[0] != '/') return Status::DataLoss("record: bad \"network.netns\"");
  auto p = network::ParseNetworkSpec(policy);
  if (!p.ok()) return Status::DataLoss("record: bad \"network.policy\": " + p.status().message());
  n.policy = *p;
  return n;
}

}  // namespace

Result<SandboxState> ParseSandboxState(const std::string& s) {
  for (SandboxState st : {SandboxState::kCreating, SandboxState::kRunning, SandboxState::kFailed,
                          SandboxState::kDeleting, SandboxState::kSuspended})
    if (s == SandboxStateName(st)) return st;
  return Status::DataLoss("unknown sandbox state '" + s + "'");
}

Result<TemplateState> ParseTemplateState(const std::string& s) {
  for (TemplateState st : {TemplateState::kBaking, TemplateState::kReady, TemplateState::kFailed})
    if (s == TemplateStateName(st)) return st;
  return Status::DataLoss("unknown template state '" + s + "'");
}

std::string EncodeSandboxRecord(const SandboxRecord& r) {
  const SandboxInfo& i = r.info;
  json j = {{"version", 1},
            {"id", i.id},
            {"template", i.template_name},
            {"labels", i.labels},
            {"state", SandboxStateName(i.state)},
            {"message", i.message},
            {"fork_of", i.fork_of},
            {"created_at_ms", ToMs(i.created_at)},
            {"cid", i.cid},
            {"pid", i.vmm_pid},
            {"pid_start_time", r.pid_start_time},
            {"ready_ms", i.ready_ms},
            {"mem_mib", i.mem_mib},
            {"vcpus", i.vcpus},
            {"token_sha256", r.token_sha256},
            {"generation", r.generation},
            {"control", r.control_path},
            {"vsock", r.vsock_path}};
  if (i.expires_at) j["expires_at_ms"] = ToMs(*i.expires_at);
  if (!i.env.empty()) j["env"] = i.env;  // absent in records of older versions
  // Only a suspended sandbox's record has these (docs/node.md, "Suspend and
  // resume"): a running one's golden stays as older versions wrote it.
  if (i.suspended_at) {
    j["suspended_at_ms"] = ToMs(*i.suspended_at);
    j["suspended_bytes"] = i.suspended_bytes;
  }
  if (!i.workspace.empty()) j["workspace"] = i.workspace;  // likewise
  if (i.network) {
    j["network"] = {{"netns", i.network->netns},
                    {"slot", i.network->slot},
                    {"mac", i.network->mac},
                    {"policy", network::ToJson(i.network->policy)}};
  }
  return j.dump(2) + "\n";
}

Result<SandboxRecord> DecodeSandboxRecord(const std::string& text) {
  ASSIGN_OR_RETURN(json j, ParseObject(text));
  SandboxRecord r;
  SandboxInfo& i = r.info;
  Reader rd(j);
  std::string state;
  int64_t created = 0, expires = 0, suspended = 0;
  rd.Get("id", &i.id);
  rd.Get("template", &i.template_name);
  rd.Get("labels", &i.labels);
  rd.Get("state", &state);
  rd.Get("message", &i.message, false);
  rd.Get("fork_of", &i.fork_of, false);
  rd.Get("env", &i.env, false);
  rd.Get("workspace", &i.workspace, false);
  rd.Get("created_at_ms", &created);
  rd.Get("expires_at_ms", &expires, false);
  rd.Get("cid", &i.cid);
  rd.Get("pid", &i.vmm_pid);
  rd.Get("pid_start_time", &r.pid_start_time);
  rd.Get("ready_ms", &i.ready_ms, false);
  rd.Get("mem_mib", &i.mem_mib);
  rd.Get("vcpus", &i.vcpus);
  rd.Get("token_sha256", &r.token_sha256);
  rd.Get("generation", &r.generation, false);
  rd.Get("control", &r.control_path);
  rd.Get("vsock", &r.vsock_path);
  rd.Get("suspended_at_ms", &suspended, false);
  rd.Get("suspended_bytes", &i.suspended_bytes, false);
  RETURN_IF_ERROR(rd.status());
  if (auto n = j.find("network"); n != j.end()) {
    ASSIGN_OR_RETURN(i.network, DecodeNetwork(*n));
  }
  ASSIGN_OR_RETURN(i.state, ParseSandboxState(state));
  i.created_at = FromMs(created);
  if (rd.Has("expires_at_ms")) i.expires_at = FromMs(expires);
  if (rd.Has("suspended_at_ms")) i.suspended_at = FromMs(suspended);
  // A suspended sandbox is its snapshot: a record that says Suspended
  // without saying when is not one this node wrote.
  if ((i.state == SandboxState::kSuspended) != i.suspended_at.has_value())
    return Status::DataLoss("record: \"suspended_at_ms\" does not match state " + state);
  return r;
}

std::string EncodeTemplateRecord(const TemplateRecord& r) {
  const TemplateInfo& i = r.info;
  const TemplateSpec& s = i.spec;
  json j = {{"version", 1},
            {"name", s.name},
            {"kernel", s.kernel},
            {"initrd", s.initrd},
            {"cmdline", s.cmdline},
            {"disks", s.disks},
            {"mem_mib", s.mem_mib},
            {"vcpus", s.vcpus},
            {"warmup", s.warmup},
            {"network", network::ToJson(s.network)},
            {"state", TemplateStateName(i.state)},
            {"message", i.message},
            {"digest", i.digest},
            {"snapshot_dir", i.snapshot_dir},
            {"nic", i.nic},
            {"workspace_slot", i.workspace_slot},
            {"bake_seconds", i.bake_seconds},
            {"ready_at_ms", ToMs(i.ready_at)}};
  return j.dump(2) + "\n";
}

Result<TemplateRecord> DecodeTemplateRecord(const std::string& text) {
  ASSIGN_OR_RETURN(json j, ParseObject(text));
  TemplateRecord r;
  TemplateInfo& i = r.info;
  TemplateSpec& s = i.spec;
  Reader rd(j);
  std::string state;
  int64_t ready = 0;
  rd.Get("name", &s.name);
  rd.Get("kernel", &s.kernel);
  rd.Get("initrd", &s.initrd, false);
  rd.Get("cmdline", &s.cmdline, false);
  rd.Get("disks", &s.disks, false);
  rd.Get("mem_mib", &s.mem_mib);
  rd.Get("vcpus", &s.vcpus);
  rd.Get("warmup", &s.warmup, false);
  rd.Get("state", &state);
  rd.Get("message", &i.message, false);
  rd.Get("digest", &i.digest, false);
  rd.Get("snapshot_dir", &i.snapshot_dir, false);
  rd.Get("nic", &i.nic, false);  // absent in records of older versions: no NIC
  rd.Get("workspace_slot", &i.workspace_slot, false);  // likewise: no slot
  rd.Get("bake_seconds", &i.bake_seconds, false);
  rd.Get("ready_at_ms", &ready, false);
  RETURN_IF_ERROR(rd.status());
  if (auto n = j.find("network"); n != j.end()) {  // absent in older records: the default
    auto p = network::ParseNetworkSpec(*n);
    if (!p.ok()) return Status::DataLoss("record: bad \"network\": " + p.status().message());
    s.network = *p;
  }
  ASSIGN_OR_RETURN(i.state, ParseTemplateState(state));
  i.ready_at = FromMs(ready);
  return r;
}

Result<WorkspaceState> ParseWorkspaceState(const std::string& s) {
  for (WorkspaceState st : {WorkspaceState::kReady, WorkspaceState::kFailed})
    if (s == WorkspaceStateName(st)) return st;
  return Status::DataLoss("unknown workspace state '" + s + "'");
}

std::string EncodeWorkspaceRecord(const WorkspaceRecord& r) {
  const WorkspaceInfo& i = r.info;
  json j = {{"version", 1},
            {"name", i.name},
            {"size_mib", i.size_mib},
            {"filesystem", i.filesystem},
            {"labels", i.labels},
            {"state", WorkspaceStateName(i.state)},
            {"message", i.message},
            {"token_sha256", r.token_sha256},
            {"created_at_ms", ToMs(i.created_at)}};
  return j.dump(2) + "\n";
}

Result<WorkspaceRecord> DecodeWorkspaceRecord(const std::string& text) {
  ASSIGN_OR_RETURN(json j, ParseObject(text));
  WorkspaceRecord r;
  WorkspaceInfo& i = r.info;
  Reader rd(j);
  std::string state;
  int64_t created = 0;
  rd.Get("name", &i.name);
  rd.Get("size_mib", &i.size_mib);
  rd.Get("filesystem", &i.filesystem);
  rd.Get("labels", &i.labels, false);
  rd.Get("state", &state);
  rd.Get("message", &i.message, false);
  rd.Get("token_sha256", &r.token_sha256);
  rd.Get("created_at_ms", &created);
  RETURN_IF_ERROR(rd.status());
  if (i.filesystem != "ext4") return Status::DataLoss("record: unknown \"filesystem\" " + i.filesystem);
  if (i.size_mib < kMinWorkspaceMiB || i.size_mib > kMaxWorkspaceMiB)
    return Status::DataLoss("record: \"size_mib\" out of range");
  if (r.token_sha256.size() != 64) return Status::DataLoss("record: bad \"token_sha256\"");
  ASSIGN_OR_RETURN(i.state, ParseWorkspaceState(state));
  i.created_at = FromMs(created);
  return r;
}

}  // namespace kubicle::noderuntime
