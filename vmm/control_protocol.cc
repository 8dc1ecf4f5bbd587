#include "vmm/control_protocol.h"

#include <nlohmann/json.hpp>

#include "vmm/devices/virtio/mac_address.h"

#include <limits>
#include <type_traits>

namespace kubicle::vmm::control {
namespace {

using nlohmann::json;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Nesting depth of a JSON text, counted without parsing it (brackets inside
// strings do not count). Lets DecodeRequest refuse a deep document before
// the parser walks it.
int MaxDepth(std::string_view text) {
  int depth = 0, max = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') max = std::max(max, ++depth);
    else if (c == '}' || c == ']') --depth;
  }
  return max;
}

// Parses one line into a JSON object; every failure is `code` naming `what`.
Result<json> ParseObject(std::string_view line, size_t max_bytes, StatusCode code,
                         const std::string& what) {
  if (line.size() > max_bytes)
    return Status(code, what + " is " + std::to_string(line.size()) +
                            " bytes, above the limit of " + std::to_string(max_bytes));
  if (MaxDepth(line) > kMaxDepth)
    return Status(code, what + " is nested deeper than " + std::to_string(kMaxDepth) + " levels");
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status(code, what + " is not a JSON object");
  return j;
}

// Reads typed fields of one JSON object; the first error sticks, so a decoder
// reads every field and checks once. Unknown fields are ignored (see the
// version rule in the header).
class Fields {
 public:
  Fields(const json& object, std::string context, StatusCode code)
      : object_(object), context_(std::move(context)), code_(code) {}

  void String(const char* key, std::string* out, bool required) {
    const json* v = Find(key, required, "a string");
    if (v == nullptr) return;
    if (!v->is_string()) return Fail(key, "must be a string");
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > kMaxStringBytes)
      return Fail(key, "is longer than " + std::to_string(kMaxStringBytes) + " bytes");
    if (required && s.empty()) return Fail(key, "must not be empty");
    *out = s;
  }
  void OptString(const char* key, std::optional<std::string>* out) {
    if (!object_.contains(key)) return;
    std::string s;
    String(key, &s, false);
    if (ok()) *out = std::move(s);
  }
  void Bool(const char* key, bool* out, bool required) {
    const json* v = Find(key, required, "true or false");
    if (v == nullptr) return;
    if (!v->is_boolean()) return Fail(key, "must be true or false");
    *out = v->get<bool>();
  }
  void U64(const char* key, uint64_t* out, bool required) {
    const json* v = Find(key, required, "a non-negative integer");
    if (v == nullptr) return;
    if (!v->is_number_unsigned()) return Fail(key, "must be a non-negative integer");
    *out = v->get<uint64_t>();
  }
  void OptU64(const char* key, std::optional<uint64_t>* out) {
    if (!object_.contains(key)) return;
    uint64_t n = 0;
    U64(key, &n, false);
    if (ok()) *out = n;
  }
  void I64(const char* key, int64_t* out, bool required) {
    const json* v = Find(key, required, "an integer");
    if (v == nullptr) return;
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Fail(key, "is out of range");
    } else if (!v->is_number_integer()) {
      return Fail(key, "must be an integer");
    }
    *out = v->get<int64_t>();
  }
  void Int(const char* key, int* out, bool required) {
    int64_t n = 0;
    I64(key, &n, required);
    if (!ok() || !object_.contains(key)) return;
    if (n < 0 || n > std::numeric_limits<int>::max()) return Fail(key, "is out of range");
    *out = static_cast<int>(n);
  }
  // The array at key (nullptr when absent and not required, or on error).
  const json* Array(const char* key, bool required, size_t max) {
    const json* v = Find(key, required, "an array");
    if (v == nullptr) return nullptr;
    if (!v->is_array()) {
      Fail(key, "must be an array");
      return nullptr;
    }
    if (v->size() > max) {
      Fail(key, "has more than " + std::to_string(max) + " entries");
      return nullptr;
    }
    return v;
  }
  void Fail(std::string_view key, const std::string& why) {
    if (status_.ok()) status_ = Status(code_, context_ + ": \"" + std::string(key) + "\" " + why);
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

 private:
  const json* Find(const char* key, bool required, const char* kind) {
    if (!ok()) return nullptr;
    auto it = object_.find(key);
    if (it == object_.end()) {
      if (required) status_ = Status(code_, context_ + " needs \"" + key + "\": " + kind);
      return nullptr;
    }
    return &*it;
  }

  const json& object_;
  std::string context_;
  StatusCode code_;
  Status status_;
};

// ---- request fields, one pair per command ----

Status CheckString(std::string_view command, std::string_view field, const std::string& s,
                   bool required) {
  if (required && s.empty())
    return Status::InvalidArgument(std::string(command) + " needs \"" + std::string(field) + "\"");
  if (s.size() > kMaxStringBytes)
    return Status::InvalidArgument(std::string(command) + ": \"" + std::string(field) +
                                   "\" is longer than " + std::to_string(kMaxStringBytes) +
                                   " bytes");
  return Status::Ok();
}

// An interface name as the kernel takes it (dev_valid_name), a NIC's MAC,
// a namespace path that cannot be read relative to the VMM's directory.
}  // namespace

bool ValidInterfaceName(std::string_view name) {
  if (name.empty() || name.size() > 15 || name == "." || name == "..") return false;
  for (unsigned char c : name) {
    if (c == '/' || c == ':' || c <= ' ' || c >= 0x7f) return false;
  }
  return true;
}

namespace {

Status CheckNet(std::string_view command, const NetAttachment& n) {
  const std::string what = std::string(command) + ": \"net\"";
  if (!ValidInterfaceName(n.tap))
    return Status::InvalidArgument(what + " \"tap\" is not an interface name (1..15 bytes, "
                                   "no '/', ':' or whitespace)");
  RETURN_IF_ERROR(devices::virtio::ParseMac(n.mac).status().WithContext(what + " \"mac\""));
  RETURN_IF_ERROR(CheckString(command, "net.netns", n.netns, false));
  if (!n.netns.empty() && n.netns[0] != '/')
    return Status::InvalidArgument(what + " \"netns\" must be an absolute path");
  return Status::Ok();
}

Status Validate(const SnapshotRequest& r) { return CheckString("snapshot", "dir", r.dir, true); }

Status Validate(const RestoreRequest& r) {
  RETURN_IF_ERROR(CheckString("restore", "snapshot", r.snapshot, true));
  for (auto [name, field] : {std::pair{"vsock_uds", &r.vsock_uds}, std::pair{"serial", &r.serial},
                             std::pair{"id", &r.id}, std::pair{"layer_dir", &r.layer_dir}}) {
    if (*field) RETURN_IF_ERROR(CheckString("restore", name, **field, false));
  }
  if (r.cid) RETURN_IF_ERROR(CheckCid(*r.cid, "restore: \"cid\""));
  if (r.net) RETURN_IF_ERROR(CheckNet("restore", *r.net));
  if (r.workspace) {
    RETURN_IF_ERROR(CheckString("restore", "workspace", *r.workspace, true));
    if ((*r.workspace)[0] != '/')
      return Status::InvalidArgument("restore: \"workspace\" must be an absolute path");
  }
  return Status::Ok();
}

Status Validate(const ForkRequest& r) {
  if (r.children.empty())
    return Status::InvalidArgument("fork needs \"children\": a non-empty array");
  if (r.children.size() > kMaxForkChildren)
    return Status::OutOfRange("fork: at most " + std::to_string(kMaxForkChildren) + " children");
  for (const ForkChild& c : r.children) {
    if (c.control.empty()) return Status::InvalidArgument("fork: every child needs \"control\"");
    for (auto [name, field] :
         {std::pair{"control", &c.control}, std::pair{"vsock_uds", &c.vsock_uds},
          std::pair{"serial", &c.serial}, std::pair{"layer_dir", &c.layer_dir}})
      RETURN_IF_ERROR(CheckString("fork", name, *field, false));
    RETURN_IF_ERROR(CheckCid(c.cid, "fork: every child's \"cid\""));
    if (c.net) RETURN_IF_ERROR(CheckNet("fork", *c.net));
  }
  return Status::Ok();
}

template <typename T>
Status Validate(const T&) {
  return Status::Ok();
}

json EncodeNet(const NetAttachment& n) {
  json j = {{"tap", n.tap}, {"mac", n.mac}};
  if (!n.netns.empty()) j["netns"] = n.netns;
  return j;
}

// The optional "net" object of a restore or a fork child.
Status DecodeNet(const json& parent, std::string_view command,
                 std::optional<NetAttachment>* out) {
  auto it = parent.find("net");
  if (it == parent.end()) return Status::Ok();
  if (!it->is_object())
    return Status::InvalidArgument(std::string(command) + ": \"net\" must be an object");
  NetAttachment n;
  Fields f(*it, std::string(command) + " net", StatusCode::kInvalidArgument);
  f.String("tap", &n.tap, true);
  f.String("mac", &n.mac, true);
  f.String("netns", &n.netns, false);
  RETURN_IF_ERROR(f.status());
  *out = std::move(n);
  return Status::Ok();
}

void Encode(const StatusRequest&, json&) {}
void Encode(const PauseRequest&, json&) {}
void Encode(const ResumeRequest&, json&) {}
void Encode(const ShutdownRequest&, json&) {}
void Encode(const SnapshotRequest& r, json& j) {
  j["dir"] = r.dir;
  j["resume"] = r.resume;
}
void Encode(const RestoreRequest& r, json& j) {
  j["snapshot"] = r.snapshot;
  if (r.vsock_uds) j["vsock_uds"] = *r.vsock_uds;
  if (r.serial) j["serial"] = *r.serial;
  if (r.id) j["id"] = *r.id;
  if (r.layer_dir) j["layer_dir"] = *r.layer_dir;
  if (r.cid) j["cid"] = *r.cid;
  if (r.net) j["net"] = EncodeNet(*r.net);
  if (r.workspace) j["workspace"] = *r.workspace;
}
void Encode(const ForkRequest& r, json& j) {
  json children = json::array();
  for (const ForkChild& c : r.children) {
    json child = {{"control", c.control}, {"cid", c.cid}};
    if (!c.vsock_uds.empty()) child["vsock_uds"] = c.vsock_uds;
    if (!c.serial.empty()) child["serial"] = c.serial;
    if (!c.layer_dir.empty()) child["layer_dir"] = c.layer_dir;
    if (c.net) child["net"] = EncodeNet(*c.net);
    children.push_back(std::move(child));
  }
  j["count"] = r.children.size();
  j["children"] = std::move(children);
}

Result<Request> DecodeFields(std::string_view cmd, const json& j) {
  if (cmd == "status") return Request{StatusRequest{}};
  if (cmd == "pause") return Request{PauseRequest{}};
  if (cmd == "resume") return Request{ResumeRequest{}};
  if (cmd == "shutdown") return Request{ShutdownRequest{}};
  if (cmd == "snapshot") {
    SnapshotRequest r;
    Fields f(j, "snapshot", StatusCode::kInvalidArgument);
    f.String("dir", &r.dir, true);
    f.Bool("resume", &r.resume, false);
    RETURN_IF_ERROR(f.status());
    return Request{std::move(r)};
  }
  if (cmd == "restore") {
    RestoreRequest r;
    Fields f(j, "restore", StatusCode::kInvalidArgument);
    f.String("snapshot", &r.snapshot, true);
    f.OptString("vsock_uds", &r.vsock_uds);
    f.OptString("serial", &r.serial);
    f.OptString("id", &r.id);
    f.OptString("layer_dir", &r.layer_dir);
    f.OptU64("cid", &r.cid);
    f.OptString("workspace", &r.workspace);
    RETURN_IF_ERROR(f.status());
    RETURN_IF_ERROR(DecodeNet(j, "restore", &r.net));
    return Request{std::move(r)};
  }
  if (cmd == "fork") {
    ForkRequest r;
    Fields f(j, "fork", StatusCode::kInvalidArgument);
    const json* children = f.Array("children", true, kMaxForkChildren);
    std::optional<uint64_t> count;
    f.OptU64("count", &count);
    RETURN_IF_ERROR(f.status());
    if (children->empty())
      return Status::InvalidArgument("fork needs \"children\": a non-empty array");
    if (count && *count != children->size())
      return Status::InvalidArgument("fork: \"count\" differs from the number of children");
    for (const json& c : *children) {
      if (!c.is_object()) return Status::InvalidArgument("fork: each child is an object");
      ForkChild child;
      Fields cf(c, "fork", StatusCode::kInvalidArgument);
      cf.String("control", &child.control, false);
      cf.U64("cid", &child.cid, false);
      cf.String("vsock_uds", &child.vsock_uds, false);
      cf.String("serial", &child.serial, false);
      cf.String("layer_dir", &child.layer_dir, false);
      RETURN_IF_ERROR(cf.status());
      RETURN_IF_ERROR(DecodeNet(c, "fork", &child.net));
      if (!c.contains("cid")) return Status::InvalidArgument("fork: every child needs \"cid\"");
      r.children.push_back(std::move(child));
    }
    return Request{std::move(r)};
  }
  std::string shown(cmd.substr(0, 64));
  return Status::InvalidArgument("unknown command '" + shown + "'");
}

// ---- replies ----

json EncodeStatus(const VmStatus& s) {
  json ranges = json::array();
  for (const GuestMemoryRange& r : s.guest_memory)
    ranges.push_back({{"guest", r.guest}, {"host", r.host}, {"size", r.size}});
  return {{"id", s.id},           {"state", VmStateName(s.state)}, {"vcpus", s.vcpus},
          {"mem_bytes", s.mem_bytes}, {"guest_cid", s.guest_cid},  {"pid", s.pid},
          {"uptime_ms", s.uptime_ms}, {"guest_memory", ranges}};
}

Status DecodeStatus(const json& j, VmStatus* s) {
  Fields f(j, "status reply", StatusCode::kDataLoss);
  std::string state;
  f.String("id", &s->id, false);
  f.String("state", &state, true);
  f.Int("vcpus", &s->vcpus, true);
  f.U64("mem_bytes", &s->mem_bytes, true);
  f.U64("guest_cid", &s->guest_cid, true);
  f.I64("pid", &s->pid, true);
  f.I64("uptime_ms", &s->uptime_ms, true);
  const json* ranges = f.Array("guest_memory", false, 64);
  RETURN_IF_ERROR(f.status());
  if (state == "pooled") s->state = VmState::kPooled;
  else if (state == "running") s->state = VmState::kRunning;
  else if (state == "paused") s->state = VmState::kPaused;
  else return Status::DataLoss("status reply: unknown VM state '" + state.substr(0, 64) + "'");
  if (ranges == nullptr) return Status::Ok();
  for (const json& r : *ranges) {
    if (!r.is_object())
      return Status::DataLoss("status reply: a guest_memory entry is not an object");
    GuestMemoryRange g;
    Fields rf(r, "status reply guest_memory", StatusCode::kDataLoss);
    rf.U64("guest", &g.guest, true);
    rf.U64("host", &g.host, true);
    rf.U64("size", &g.size, true);
    RETURN_IF_ERROR(rf.status());
    s->guest_memory.push_back(g);
  }
  return Status::Ok();
}

Status DecodeBody(const json& j, VmStatus* out) { return DecodeStatus(j, out); }
Status DecodeBody(const json&, ShutdownReply*) { return Status::Ok(); }
Status DecodeBody(const json& j, SnapshotReply* out) {
  RETURN_IF_ERROR(DecodeStatus(j, &out->status));
  Fields f(j, "snapshot reply", StatusCode::kDataLoss);
  f.String("dir", &out->dir, true);
  return f.status();
}
Status DecodeBody(const json& j, RestoreReply* out) {
  RETURN_IF_ERROR(DecodeStatus(j, &out->status));
  Fields f(j, "restore reply", StatusCode::kDataLoss);
  f.I64("restore_us", &out->restore_us, true);
  return f.status();
}
Status DecodeBody(const json& j, ForkReply* out) {
  RETURN_IF_ERROR(DecodeStatus(j, &out->status));
  Fields f(j, "fork reply", StatusCode::kDataLoss);
  f.I64("fork_us", &out->fork_us, true);
  const json* pids = f.Array("pids", true, kMaxForkChildren);
  RETURN_IF_ERROR(f.status());
  for (const json& p : *pids) {
    if (!p.is_number_unsigned() || p.get<uint64_t>() == 0 ||
        p.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      return Status::DataLoss("fork reply: \"pids\" holds something that is not a pid");
    out->pids.push_back(p.get<int64_t>());
  }
  return Status::Ok();
}

std::string Dump(const json& j) {
  // Never throws: strings that are not UTF-8 (a path from a guest-facing
  // file name, say) are replaced rather than aborting the reply.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

Status CheckCid(uint64_t cid, std::string_view what) {
  if (ValidCid(cid)) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + ": guest CIDs are " +
                                 std::to_string(kMinGuestCid) + ".." +
                                 std::to_string(kMaxGuestCid) +
                                 " (0-2 are reserved, 2^32-1 is VMADDR_CID_ANY), not " +
                                 std::to_string(cid));
}

std::string_view CommandName(const Request& request) {
  return std::visit(Overloaded{
                        [](const StatusRequest&) { return std::string_view("status"); },
                        [](const PauseRequest&) { return std::string_view("pause"); },
                        [](const ResumeRequest&) { return std::string_view("resume"); },
                        [](const SnapshotRequest&) { return std::string_view("snapshot"); },
                        [](const RestoreRequest&) { return std::string_view("restore"); },
                        [](const ForkRequest&) { return std::string_view("fork"); },
                        [](const ShutdownRequest&) { return std::string_view("shutdown"); },
                    },
                    request);
}

std::string_view VmStateName(VmState state) {
  switch (state) {
    case VmState::kPooled: return "pooled";
    case VmState::kRunning: return "running";
    case VmState::kPaused: return "paused";
  }
  return "unknown";
}

Status ValidateRequest(const Request& request) {
  return std::visit([](const auto& r) { return Validate(r); }, request);
}

Result<std::string> EncodeRequest(const Request& request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  json j = {{"cmd", CommandName(request)}, {"v", kProtocolVersion}};
  std::visit([&j](const auto& r) { Encode(r, j); }, request);
  try {
    return j.dump();
  } catch (const json::exception&) {
    return Status::InvalidArgument(std::string(CommandName(request)) +
                                   ": a string field is not valid UTF-8");
  }
}

Result<Request> DecodeRequest(std::string_view line) {
  ASSIGN_OR_RETURN(json j,
                   ParseObject(line, kMaxRequestBytes, StatusCode::kInvalidArgument, "request"));
  auto cmd = j.find("cmd");
  if (cmd == j.end() || !cmd->is_string())
    return Status::InvalidArgument("request has no string field 'cmd'");
  auto v = j.find("v");
  if (v != j.end()) {
    if (!v->is_number_unsigned() || v->get<uint64_t>() == 0)
      return Status::InvalidArgument("request: \"v\" must be a protocol version (1, 2, ...)");
    if (v->get<uint64_t>() > static_cast<uint64_t>(kProtocolVersion))
      return Status::FailedPrecondition("request speaks control protocol version " +
                                        std::to_string(v->get<uint64_t>()) +
                                        ", this kubicle-vmm speaks up to " +
                                        std::to_string(kProtocolVersion));
  }
  ASSIGN_OR_RETURN(Request r, DecodeFields(cmd->get_ref<const std::string&>(), j));
  RETURN_IF_ERROR(ValidateRequest(r));
  return r;
}

std::string EncodeReply(const Reply& reply) {
  json j = std::visit(Overloaded{
                          [](const VmStatus& s) { return EncodeStatus(s); },
                          [](const SnapshotReply& r) {
                            json j = EncodeStatus(r.status);
                            j["dir"] = r.dir;
                            return j;
                          },
                          [](const RestoreReply& r) {
                            json j = EncodeStatus(r.status);
                            j["restore_us"] = r.restore_us;
                            return j;
                          },
                          [](const ForkReply& r) {
                            json j = EncodeStatus(r.status);
                            j["pids"] = r.pids;
                            j["fork_us"] = r.fork_us;
                            return j;
                          },
                          [](const ShutdownReply&) { return json::object(); },
                      },
                      reply);
  j["ok"] = true;
  j["v"] = kProtocolVersion;
  return Dump(j);
}

std::string EncodeError(std::string_view text) {
  return Dump(json{{"ok", false}, {"v", kProtocolVersion}, {"error", std::string(text)}});
}

template <typename Req>
Result<typename ReplyOf<Req>::type> DecodeReply(std::string_view line) {
  const std::string cmd(CommandName(Request{Req{}}));
  ASSIGN_OR_RETURN(json j,
                   ParseObject(line, kMaxReplyBytes, StatusCode::kDataLoss, cmd + " reply"));
  auto ok = j.find("ok");
  if (ok == j.end() || !ok->is_boolean())
    return Status::DataLoss(cmd + " reply has no boolean field 'ok'");
  if (!ok->get<bool>()) {
    auto e = j.find("error");
    std::string text = e != j.end() && e->is_string() ? e->get<std::string>() : "no error text";
    if (text.size() > kMaxStringBytes) text.resize(kMaxStringBytes);
    return Status::FailedPrecondition("kubicle-vmm " + cmd + ": " + text);
  }
  typename ReplyOf<Req>::type out;
  RETURN_IF_ERROR(DecodeBody(j, &out));
  return out;
}

template Result<VmStatus> DecodeReply<StatusRequest>(std::string_view);
template Result<VmStatus> DecodeReply<PauseRequest>(std::string_view);
template Result<VmStatus> DecodeReply<ResumeRequest>(std::string_view);
template Result<SnapshotReply> DecodeReply<SnapshotRequest>(std::string_view);
template Result<RestoreReply> DecodeReply<RestoreRequest>(std::string_view);
template Result<ForkReply> DecodeReply<ForkRequest>(std::string_view);
template Result<ShutdownReply> DecodeReply<ShutdownRequest>(std::string_view);

}  // namespace kubicle::vmm::control
