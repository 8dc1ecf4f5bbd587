#include "noderuntime/api/codec.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <initializer_list>

namespace kubicle::noderuntime::api {

using guest::protocol::ByteSpan;
using guest::protocol::Bytes;

namespace {

// Reads typed fields out of one JSON object, naming the field on error.
class Fields {
 public:
  explicit Fields(const json& obj) : obj_(obj) {}

  Status OnlyKnown(std::initializer_list<std::string_view> known) const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
        return Status::InvalidArgument("unknown field \"" + it.key() + "\"");
      }
    }
    return Status::Ok();
  }
  const json* Get(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  Status String(const char* key, std::string* out) const {
    const json* v = Get(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return TypeError(key, "a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status Int(const char* key, int64_t min, int64_t max, std::optional<int64_t>* out) const {
    const json* v = Get(key);
    if (!v) return Status::Ok();
    if (!v->is_number_integer()) return TypeError(key, "an integer");
    // Unsigned values above INT64_MAX are out of range either way.
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max)) {
      return RangeError(key, min, max);
    }
    int64_t n = v->get<int64_t>();
    if (n < min || n > max) return RangeError(key, min, max);
    *out = n;
    return Status::Ok();
  }
  Status StringList(const char* key, std::vector<std::string>* out) const {
    const json* v = Get(key);
    if (!v) return Status::Ok();
    if (!v->is_array()) return TypeError(key, "an array of strings");
    out->clear();
    for (const json& e : *v) {
      if (!e.is_string()) return TypeError(key, "an array of strings");
      out->push_back(e.get<std::string>());
    }
    return Status::Ok();
  }
  Status StringMap(const char* key, Labels* out) const {
    const json* v = Get(key);
    if (!v) return Status::Ok();
    if (!v->is_object()) return TypeError(key, "an object of strings");
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it->is_string()) return TypeError(key, "an object of strings");
      (*out)[it.key()] = it->get<std::string>();
    }
    return Status::Ok();
  }

 private:
  static Status TypeError(const char* key, const char* want) {
    return Status::InvalidArgument(std::string("field \"") + key + "\" must be " + want);
  }
  static Status RangeError(const char* key, int64_t min, int64_t max) {
    return Status::InvalidArgument(std::string("field \"") + key + "\" must be in [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  const json& obj_;
};

bool ValidLabelName(std::string_view s) {
  // [A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?, at most 63.
  if (s.empty() || s.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool ValidDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view part = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (!ValidId(part)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

}  // namespace

bool IsValidUtf8(ByteSpan d) {
  size_t i = 0;
  while (i < d.size()) {
    uint8_t c = d[i];
    size_t n;  // continuation bytes
    if (c < 0x80) n = 0;
    else if ((c >> 5) == 6) n = 1;
    else if ((c >> 4) == 14) n = 2;
    else if ((c >> 3) == 30) n = 3;
    else return false;
    if (d.size() - i <= n) return false;
    uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (size_t k = 1; k <= n; ++k) {
      if ((d[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d[i + k] & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

bool ValidId(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  auto ok = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!ok(s.front()) || !ok(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return ok(c) || c == '-'; });
}

Status ValidateLabels(const Labels& labels) {
  for (const auto& [key, value] : labels) {
    size_t slash = key.find('/');
    std::string_view name = key;
    if (slash != std::string::npos) {
      if (!ValidDnsSubdomain(std::string_view(key).substr(0, slash))) {
        return Status::InvalidArgument("label key \"" + key + "\" has an invalid prefix");
      }
      name = std::string_view(key).substr(slash + 1);
    }
    if (!ValidLabelName(name)) {
      return Status::InvalidArgument("label key \"" + key + "\" is not a valid label name");
    }
    if (!value.empty() && !ValidLabelName(value)) {
      return Status::InvalidArgument("label value \"" + value + "\" of \"" + key +
                                     "\" is not a valid label value");
    }
  }
  return Status::Ok();
}

Result<json> ParseJsonObject(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("request body is not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument("request body must be a JSON object");
  return j;
}

Result<TemplateSpec> TemplateSpecFromJson(const json& body, const std::string& name) {
  Fields f(body);
  RETURN_IF_ERROR(f.OnlyKnown(
      {"name", "kernel", "initrd", "cmdline", "disks", "memMib", "vcpus", "warmup", "network"}));
  TemplateSpec spec;
  spec.name = name;
  std::string body_name = name;
  RETURN_IF_ERROR(f.String("name", &body_name));
  if (body_name != name) {
    return Status::InvalidArgument("field \"name\" (" + body_name + ") differs from the URL's (" +
                                   name + ")");
  }
  RETURN_IF_ERROR(f.String("kernel", &spec.kernel));
  if (spec.kernel.empty()) return Status::InvalidArgument("field \"kernel\" is required");
  RETURN_IF_ERROR(f.String("initrd", &spec.initrd));
  RETURN_IF_ERROR(f.String("cmdline", &spec.cmdline));
  RETURN_IF_ERROR(f.StringList("disks", &spec.disks));
  RETURN_IF_ERROR(f.StringList("warmup", &spec.warmup));
  std::optional<int64_t> mem, vcpus;
  RETURN_IF_ERROR(f.Int("memMib", 16, 1 << 20, &mem));
  RETURN_IF_ERROR(f.Int("vcpus", 1, 64, &vcpus));
  if (mem) spec.mem_mib = static_cast<uint64_t>(*mem);
  if (vcpus) spec.vcpus = static_cast<uint32_t>(*vcpus);
  auto net = body.find("network");
  ASSIGN_OR_RETURN(spec.network, network::ParseNetworkSpec(net == body.end() ? json() : *net));
  return spec;
}

Result<SandboxSpec> SandboxSpecFromJson(const json& body) {
  Fields f(body);
  RETURN_IF_ERROR(
      f.OnlyKnown({"template", "id", "labels", "ttlSeconds", "hostname", "network", "workspace"}));
  SandboxSpec spec;
  RETURN_IF_ERROR(f.String("template", &spec.template_name));
  if (spec.template_name.empty()) return Status::InvalidArgument("field \"template\" is required");
  RETURN_IF_ERROR(f.String("id", &spec.id));
  if (!spec.id.empty() && !ValidId(spec.id)) {
    return Status::InvalidArgument("field \"id\" (" + spec.id +
                                   ") must be a DNS-1123 label: [a-z0-9-], at most 63");
  }
  RETURN_IF_ERROR(f.StringMap("labels", &spec.labels));
  RETURN_IF_ERROR(ValidateLabels(spec.labels));
  RETURN_IF_ERROR(f.Int("ttlSeconds", 1, kMaxTtlSeconds, &spec.ttl_seconds));
  RETURN_IF_ERROR(f.String("hostname", &spec.hostname));
  if (!spec.hostname.empty() && !ValidId(spec.hostname)) {
    return Status::InvalidArgument("field \"hostname\" must be a DNS-1123 label");
  }
  RETURN_IF_ERROR(f.String("workspace", &spec.workspace));
  if (!spec.workspace.empty() && !ValidId(spec.workspace))
    return Status::InvalidArgument("field \"workspace\" must be a DNS-1123 label");
  // Strict (unknown keys, bad CIDRs, ports, limits), as spec.network;
  // absent or null: the template's.
  if (auto net = body.find("network"); net != body.end() && !net->is_null()) {
    ASSIGN_OR_RETURN(spec.network, network::ParseNetworkSpec(*net));
  }
  return spec;
}

Result<ForkRequest> ForkRequestFromJson(const json& body, const std::string& source_id) {
  Fields f(body);
  RETURN_IF_ERROR(f.OnlyKnown({"count", "labels", "ttlSeconds"}));
  ForkRequest req;
  req.source_id = source_id;
  std::optional<int64_t> count;
  RETURN_IF_ERROR(f.Int("count", 1, kMaxForkCount, &count));
  if (count) req.count = static_cast<uint32_t>(*count);
  RETURN_IF_ERROR(f.StringMap("labels", &req.labels));
  RETURN_IF_ERROR(ValidateLabels(req.labels));
  RETURN_IF_ERROR(f.Int("ttlSeconds", 1, kMaxTtlSeconds, &req.ttl_seconds));
  return req;
}

Result<ExecOptions> ExecOptionsFromJson(const json& body) {
  Fields f(body);
  RETURN_IF_ERROR(
      f.OnlyKnown({"argv", "shell", "env", "cwd", "stdinBase64", "timeoutSeconds"}));
  ExecOptions opts;
  auto& r = opts.request;
  RETURN_IF_ERROR(f.StringList("argv", &r.argv));
  RETURN_IF_ERROR(f.String("shell", &r.shell_command));
  if (r.argv.empty() == r.shell_command.empty()) {
    return Status::InvalidArgument("exactly one of \"argv\" (non-empty) and \"shell\" is required");
  }
  RETURN_IF_ERROR(f.StringList("env", &r.env));
  for (const std::string& e : r.env) {
    if (e.find('=') == std::string::npos || e.front() == '=') {
      return Status::InvalidArgument("env entry \"" + e + "\" is not KEY=VALUE");
    }
  }
  RETURN_IF_ERROR(f.String("cwd", &r.cwd));
  std::string stdin_b64;
  RETURN_IF_ERROR(f.String("stdinBase64", &stdin_b64));
  auto stdin_data = Base64Decode(stdin_b64);
  if (!stdin_data.ok()) {
    return Status::InvalidArgument("field \"stdinBase64\": " + stdin_data.status().message());
  }
  r.stdin_data = std::move(*stdin_data);
  std::optional<int64_t> timeout;
  RETURN_IF_ERROR(f.Int("timeoutSeconds", 1, kMaxExecTimeoutSeconds, &timeout));
  if (timeout) opts.timeout = std::chrono::seconds(*timeout);
  r.timeout_ms = static_cast<uint64_t>(opts.timeout.count());
  return opts;
}

std::string FormatTime(WallTime t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

json ToJson(const TemplateSpec& s) {
  return json{{"name", s.name},     {"kernel", s.kernel}, {"initrd", s.initrd},
              {"cmdline", s.cmdline}, {"disks", s.disks}, {"memMib", s.mem_mib},
              {"vcpus", s.vcpus},   {"warmup", s.warmup}, {"network", network::ToJson(s.network)}};
}

json ToJson(const TemplateInfo& info) {
  json j{{"name", info.spec.name},
         {"spec", ToJson(info.spec)},
         {"state", TemplateStateName(info.state)},
         {"message", info.message},
         {"digest", info.digest},
         {"snapshotDir", info.snapshot_dir},
         {"nic", info.nic},
         {"workspaceSlot", info.workspace_slot},
         {"bakeSeconds", info.bake_seconds}};
  if (info.state == TemplateState::kReady) j["readyAt"] = FormatTime(info.ready_at);
  return j;
}

json ToJson(const SandboxInfo& info, bool with_token) {
  json j{{"id", info.id},
         {"template", info.template_name},
         {"labels", info.labels},
         {"state", SandboxStateName(info.state)},
         {"message", info.message},
         {"forkOf", info.fork_of},
         {"createdAt", FormatTime(info.created_at)},
         {"cid", info.cid},
         {"vmmPid", info.vmm_pid},
         {"readyMs", info.ready_ms},
         {"memMib", info.mem_mib},
         {"vcpus", info.vcpus}};
  j["expiresAt"] = info.expires_at ? json(FormatTime(*info.expires_at)) : json(nullptr);
  j["suspendedAt"] = info.suspended_at ? json(FormatTime(*info.suspended_at)) : json(nullptr);
  j["suspendedBytes"] = info.suspended_bytes;
  // The policy in force and the guest's MAC; the namespace path stays the node's.
  if (info.network) {
    j["network"] = network::ToJson(info.network->policy);
    j["network"]["mac"] = info.network->mac;
  } else {
    j["network"] = nullptr;
  }
  j["workspace"] = info.workspace.empty() ? json(nullptr) : json(info.workspace);
  if (with_token) j["token"] = info.token;
  return j;
}

Result<WorkspaceSpec> WorkspaceSpecFromJson(const json& body, const std::string& name) {
  Fields f(body);
  RETURN_IF_ERROR(f.OnlyKnown({"name", "sizeMiB", "tokenSha256", "labels"}));
  WorkspaceSpec spec;
  spec.name = name;
  std::string body_name;
  RETURN_IF_ERROR(f.String("name", &body_name));
  if (!body_name.empty() && body_name != name)
    return Status::InvalidArgument("field \"name\" (" + body_name + ") differs from the path's (" + name + ")");
  std::optional<int64_t> size;
  RETURN_IF_ERROR(f.Int("sizeMiB", static_cast<int64_t>(kMinWorkspaceMiB),
                        static_cast<int64_t>(kMaxWorkspaceMiB), &size));
  if (!size) return Status::InvalidArgument("field \"sizeMiB\" is required");
  spec.size_mib = static_cast<uint64_t>(*size);
  RETURN_IF_ERROR(f.String("tokenSha256", &spec.token_sha256));
  if (!spec.token_sha256.empty()) {
    bool hex = spec.token_sha256.size() == 64;
    for (char c : spec.token_sha256) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hex) return Status::InvalidArgument("field \"tokenSha256\" must be 64 lowercase hex digits");
  }
  RETURN_IF_ERROR(f.StringMap("labels", &spec.labels));
  RETURN_IF_ERROR(ValidateLabels(spec.labels));
  return spec;
}

json ToJson(const WorkspaceInfo& info, bool with_token) {
  json j{{"name", info.name},
         {"sizeMiB", info.size_mib},
         {"filesystem", info.filesystem},
         {"labels", info.labels},
         {"state", WorkspaceStateName(info.state)},
         {"message", info.message},
         {"bytesUsed", info.bytes_used},
         {"createdAt", FormatTime(info.created_at)}};
  j["attachedTo"] = info.attached_to.empty() ? json(nullptr) : json(info.attached_to);
  if (with_token && !info.token.empty()) j["token"] = info.token;
  return j;
}

json StatsToJson(const std::string& id, const SandboxStats& s) {
  return {{"id", id},
          {"cpuUsageNanos", s.cpu_usage_ns},
          {"memoryBytes", s.memory_bytes},
          {"memoryLimitBytes", s.memory_limit_bytes},
          {"pids", s.pids},
          {"memMib", s.mem_mib},
          {"vcpus", s.vcpus},
          {"source", s.source}};
}

json ExecResultToJson(const guest::client::ExecResult& r) {
  json j{{"exitCode", r.exit_code ? json(*r.exit_code) : json(nullptr)},
         {"signal", r.signal ? json(*r.signal) : json(nullptr)},
         {"timedOut", r.timed_out},
         {"truncated", r.truncated}};
  if (IsValidUtf8(r.stdout_data) && IsValidUtf8(r.stderr_data)) {
    j["encoding"] = "utf-8";
    j["stdout"] = std::string(r.stdout_data.begin(), r.stdout_data.end());
    j["stderr"] = std::string(r.stderr_data.begin(), r.stderr_data.end());
  } else {
    j["encoding"] = "base64";
    j["stdout"] = Base64Encode(r.stdout_data);
    j["stderr"] = Base64Encode(r.stderr_data);
  }
  return j;
}

Result<RunOptions> RunOptionsFromJson(const std::string& template_name, const json& body) {
  if (!body.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  json exec = body;
  std::optional<std::string> workspace;
  if (auto it = exec.find("workspace"); it != exec.end()) {
    if (!it->is_null() && !it->is_string())
      return Status::InvalidArgument("field \"workspace\" must be a string");
    if (it->is_string()) workspace = it->get<std::string>();
    exec.erase(it);
  }
  RunOptions o;
  o.template_name = template_name;
  ASSIGN_OR_RETURN(o.exec, ExecOptionsFromJson(exec));
  if (workspace) {
    if (!ValidId(*workspace))
      return Status::InvalidArgument("field \"workspace\" must be a DNS-1123 label");
    o.workspace = *workspace;
  }
  return o;
}

json RunTimingsToJson(const RunTimings& t) {
  return {{"restoreMs", t.restore_ms}, {"execMs", t.exec_ms}, {"totalMs", t.total_ms}};
}

json RunResultToJson(const RunResult& r) {
  json j = ExecResultToJson(r.exec);
  j["timings"] = RunTimingsToJson(r.timings);
  return j;
}

std::string NdjsonLine(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace kubicle::noderuntime::api
