// FakeSandboxes (fake_sandboxes.h): sandboxes as records and RAM files.
#include "noderuntime/server/testing/fake_sandboxes.h"

#include <algorithm>
#include <random>

#include "kube/label_selector.h"
#include "noderuntime/network/netns_connect.h"
#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::server::testing {

using guest::client::ExecResult;
using guest::protocol::Bytes;
using guest::protocol::ByteSpan;

namespace {

std::string RandomToken() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 32; ++i) t.push_back(kHex[rng() & 15]);
  return t;
}

}  // namespace

ExecResult BuiltinExec(const ExecOptions& o) {
  ExecResult r;
  const auto& argv = o.request.argv;
  auto emit = [&](guest::protocol::OutputStream s, const std::string& text) {
    Bytes b(text.begin(), text.end());
    if (o.io.on_output) {
      o.io.on_output(s, b);
    } else {
      Bytes& dst = s == guest::protocol::OutputStream::kStdout ? r.stdout_data : r.stderr_data;
      dst.insert(dst.end(), b.begin(), b.end());
    }
  };
  if (!argv.empty() && argv[0] == "echo") {
    std::string out;
    for (size_t i = 1; i < argv.size(); ++i) out += (i > 1 ? " " : "") + argv[i];
    emit(guest::protocol::OutputStream::kStdout, out + "\n");
    r.exit_code = 0;
  } else if (argv.size() == 2 && argv[0] == "fail") {
    emit(guest::protocol::OutputStream::kStderr, "failing\n");
    r.exit_code = std::atoi(argv[1].c_str());
  } else {
    r.exit_code = 127;
  }
  return r;
}


Result<SandboxInfo> FakeSandboxes::NewLocked(SandboxInfo info) {
  if (info.id.empty()) info.id = "sbx-" + std::to_string(next_id_++);
  if (sandboxes_.count(info.id)) return Status::AlreadyExists("sandbox " + info.id + " exists");
  info.state = SandboxState::kRunning;
  info.created_at = std::chrono::system_clock::now();
  info.cid = next_cid_++;
  info.vmm_pid = 1000 + static_cast<int>(info.cid);
  info.ready_ms = 1.5;
  return info;
}

Result<SandboxInfo> FakeSandboxes::AddLocked(SandboxInfo info, const std::string& token_sha256,
                                                  bool token_later) {
  ASSIGN_OR_RETURN(info, NewLocked(std::move(info)));
  Sandbox& sb = sandboxes_[info.id];
  if (token_sha256.empty() && token_later) {
    sb.token_sha256.clear();  // SetSandboxToken gives it; nothing opens it until then
  } else if (token_sha256.empty()) {
    info.token = RandomToken();
    sb.token_sha256 = Sha256Hex(info.token);
  } else {
    sb.token_sha256 = token_sha256;  // the caller holds the token
  }
  sb.info = info;
  sb.info.token.clear();
  return info;
}

Result<SandboxInfo> FakeSandboxes::CreateSandbox(const SandboxSpec& spec) {
  ++calls_;
  std::lock_guard l(mu_);
  if (!create_error.ok()) {
    Status failed = create_error;
    if (create_errors_left_ > 0 && --create_errors_left_ == 0) create_error = Status::Ok();
    return failed;
  }
  const std::optional<TemplateInfo> t = templates_->Find(spec.template_name);
  if (!t) return Status::NotFound("no template " + spec.template_name);
  SandboxInfo info;
  info.id = spec.id;
  info.template_name = spec.template_name;
  info.labels = spec.labels;
  info.env = spec.env;
  info.mem_mib = t->spec.mem_mib;
  info.vcpus = t->spec.vcpus;
  if (spec.ttl_seconds) {
    info.expires_at = std::chrono::system_clock::now() + std::chrono::seconds(*spec.ttl_seconds);
  }
  if (!spec.id.empty()) RETURN_IF_ERROR(workspaces_->Attach(spec.workspace, spec.id));
  info.workspace = spec.workspace;
  auto added = AddLocked(std::move(info), spec.token_sha256, spec.token_later);
  if (!added.ok()) {
    if (!spec.id.empty()) workspaces_->Release(spec.id);
    return added;
  }
  if (spec.id.empty()) {
    Status st = workspaces_->Attach(spec.workspace, added->id);
    if (!st.ok()) {
      sandboxes_.erase(added->id);
      return st;
    }
  }
  return added;
}

Result<std::vector<SandboxInfo>> FakeSandboxes::ForkSandbox(const ForkRequest& req) {
  ++calls_;
  std::lock_guard l(mu_);
  auto src = sandboxes_.find(req.source_id);
  if (src == sandboxes_.end()) return Status::NotFound("no sandbox " + req.source_id);
  if (!src->second.info.workspace.empty())
    return Status::FailedPrecondition("sandbox " + req.source_id + " has workspace " +
                                      src->second.info.workspace +
                                      " attached: a sandbox with a workspace cannot be forked");
  std::vector<SandboxInfo> out;
  const uint32_t count = req.children.empty() ? req.count : static_cast<uint32_t>(req.children.size());
  for (const ForkChildSpec& c : req.children) {
    if (sandboxes_.count(c.id)) return Status::AlreadyExists("sandbox " + c.id + " exists");
  }
  for (uint32_t i = 0; i < count; ++i) {
    const ForkChildSpec* spec = req.children.empty() ? nullptr : &req.children[i];
    SandboxInfo child = src->second.info;
    child.id = spec && !spec->id.empty() ? spec->id : req.source_id + "-f" + std::to_string(next_id_++);
    child.fork_of = req.source_id;
    for (const auto& [k, v] : req.labels) child.labels[k] = v;
    if (spec) {
      for (const auto& [k, v] : spec->labels) child.labels[k] = v;
      if (!spec->env.empty()) child.env = spec->env;
    }
    child.expires_at.reset();
    if (req.ttl_seconds) {
      child.expires_at = std::chrono::system_clock::now() + std::chrono::seconds(*req.ttl_seconds);
    }
    ASSIGN_OR_RETURN(SandboxInfo added, AddLocked(std::move(child), spec ? spec->token_sha256 : ""));
    out.push_back(std::move(added));
  }
  return out;
}

Result<SandboxInfo> FakeSandboxes::GetSandbox(const std::string& id) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox " + id);
  SandboxInfo info = it->second.info;
  info.token.clear();
  return info;
}

Result<std::vector<SandboxInfo>> FakeSandboxes::ListSandboxes(const std::string& selector) {
  ++calls_;
  ASSIGN_OR_RETURN(kube::LabelSelector sel, kube::LabelSelector::Parse(selector));
  std::lock_guard l(mu_);
  std::vector<SandboxInfo> out;
  for (const auto& [_, s] : sandboxes_) {
    if (!sel.Matches(s.info.labels)) continue;
    out.push_back(s.info);
    out.back().token.clear();
  }
  return out;
}

Status FakeSandboxes::DeleteSandbox(const std::string& id) {
  ++calls_;
  std::lock_guard l(mu_);
  if (!sandboxes_.erase(id)) return Status::NotFound("no sandbox " + id);
  workspaces_->Release(id);
  return Status::Ok();
}

Result<std::vector<std::string>> FakeSandboxes::DeleteSandboxes(const std::string& selector) {
  ++calls_;
  ASSIGN_OR_RETURN(kube::LabelSelector sel, kube::LabelSelector::Parse(selector));
  std::lock_guard l(mu_);
  std::vector<std::string> ids;
  for (auto it = sandboxes_.begin(); it != sandboxes_.end();) {
    if (sel.Matches(it->second.info.labels)) {
      ids.push_back(it->first);
      workspaces_->Release(it->first);
      it = sandboxes_.erase(it);
    } else {
      ++it;
    }
  }
  return ids;
}

Status FakeSandboxes::NotSuspendedLocked(const std::string& id) const {
  auto it = sandboxes_.find(id);
  if (it != sandboxes_.end() && it->second.info.state == SandboxState::kSuspended)
    return Status::FailedPrecondition("sandbox '" + id + "' is Suspended: resume it first");
  return Status::Ok();
}

Result<SandboxInfo> FakeSandboxes::SuspendSandbox(const std::string& id) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox " + id);
  SandboxInfo& info = it->second.info;
  if (info.state == SandboxState::kRunning) {
    info.state = SandboxState::kSuspended;
    info.suspended_at = std::chrono::system_clock::now();
    info.suspended_bytes = info.mem_mib << 20;
    info.vmm_pid = 0;
  } else if (info.state != SandboxState::kSuspended) {
    return Status::FailedPrecondition("sandbox '" + id + "' is " + SandboxStateName(info.state));
  }
  return info;
}

Result<SandboxInfo> FakeSandboxes::ResumeSandbox(const std::string& id) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox " + id);
  SandboxInfo& info = it->second.info;
  if (info.state == SandboxState::kSuspended) {
    info.state = SandboxState::kRunning;
    info.suspended_at.reset();
    info.suspended_bytes = 0;
  } else if (info.state != SandboxState::kRunning) {
    return Status::FailedPrecondition("sandbox '" + id + "' is " + SandboxStateName(info.state));
  }
  return info;
}

bool FakeSandboxes::CheckToken(const std::string& id, const std::string& token) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  return it != sandboxes_.end() && !token.empty() && Sha256Hex(token) == it->second.token_sha256;
}

Status FakeSandboxes::SetSandboxToken(const std::string& id, const std::string& token_sha256) {
  ++calls_;
  bool hex = token_sha256.size() == 64;
  for (char c : token_sha256) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) return Status::InvalidArgument("token_sha256 is not 64 lowercase hex digits");
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox '" + id + "'");
  if (it->second.token_sha256 == token_sha256) return Status::Ok();
  if (!it->second.token_sha256.empty())
    return Status::FailedPrecondition("sandbox '" + id + "' already has another token");
  it->second.token_sha256 = token_sha256;
  return Status::Ok();
}

Result<ExecResult> FakeSandboxes::Exec(const std::string& id, const ExecOptions& options) {
  ++calls_;
  {
    std::lock_guard l(mu_);
    if (!sandboxes_.count(id)) return Status::NotFound("no sandbox " + id);
    RETURN_IF_ERROR(NotSuspendedLocked(id));
  }
  if (exec_hook) return exec_hook(id, options);
  return BuiltinExec(options);
}

Status FakeSandboxes::WriteFile(const std::string& id, const std::string& path,
                                     ByteSpan data, uint32_t mode) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox " + id);
  RETURN_IF_ERROR(NotSuspendedLocked(id));
  if (path.empty() || path.front() != '/') return Status::InvalidArgument("path must be absolute");
  it->second.files[path] = {Bytes(data.begin(), data.end()), mode};
  return Status::Ok();
}

Result<Bytes> FakeSandboxes::FileLocked(const std::string& id, const std::string& path) {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox " + id);
  RETURN_IF_ERROR(NotSuspendedLocked(id));
  auto f = it->second.files.find(path);
  if (f == it->second.files.end()) return Status::NotFound("no file " + path);
  return f->second.first;
}

Result<Bytes> FakeSandboxes::ReadFile(const std::string& id, const std::string& path) {
  ++calls_;
  std::lock_guard l(mu_);
  ASSIGN_OR_RETURN(Bytes data, FileLocked(id, path));
  if (data.size() > max_read_file_bytes) {
    return Status::ResourceExhausted("file " + path + " is larger than the " +
                                     std::to_string(max_read_file_bytes >> 20) +
                                     " MiB in-memory read limit; use the streamed read");
  }
  return data;
}

Status FakeSandboxes::ReadFileStream(const std::string& id, const std::string& path,
                                          const guest::client::FileChunkFn& on_chunk) {
  ++calls_;
  Bytes data;
  {
    std::lock_guard l(mu_);  // not held in on_chunk, which may block
    ASSIGN_OR_RETURN(data, FileLocked(id, path));
  }
  const size_t step = std::max<size_t>(1, read_chunk_bytes);
  size_t off = 0;
  do {
    if (read_fails_after_bytes && off >= *read_fails_after_bytes) {
      return Status::Unavailable("agent connection broken: the guest went away");
    }
    const size_t n = std::min(step, data.size() - off);
    guest::client::FileChunk c{off, ByteSpan(data.data() + off, n), std::nullopt};
    if (off == 0) c.file_size = data.size();
    RETURN_IF_ERROR(on_chunk(c));
    off += n;
  } while (off < data.size());
  return Status::Ok();
}

Result<ConsoleRead> FakeSandboxes::ReadConsole(const std::string& id, uint64_t offset,
                                                   size_t max_bytes) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("sandbox " + id + " not found");
  const std::string& log = it->second.console;
  ConsoleRead r;
  r.size = log.size();
  r.offset = offset > log.size() ? 0 : offset;
  size_t n = std::min<size_t>(max_bytes, log.size() - r.offset);
  r.data.assign(log.begin() + static_cast<std::ptrdiff_t>(r.offset),
                log.begin() + static_cast<std::ptrdiff_t>(r.offset + n));
  r.running = it->second.info.state == SandboxState::kRunning;
  return r;
}

Result<SandboxStats> FakeSandboxes::GetSandboxStats(const std::string& id) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("sandbox " + id + " not found");
  if (it->second.info.state != SandboxState::kRunning) {
    return Status::FailedPrecondition("sandbox " + id + " is not running");
  }
  SandboxStats s = it->second.stats;
  s.mem_mib = it->second.info.mem_mib;
  s.vcpus = it->second.info.vcpus;
  if (s.source.empty()) s.source = "cgroup";
  return s;
}

Result<guest::protocol::StatReply> FakeSandboxes::StatFile(const std::string& id,
                                                                const std::string& path) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox " + id);
  return StatRamFile(it->second.files, path);
}

Result<std::vector<guest::protocol::DirEntry>> FakeSandboxes::ListFiles(
    const std::string& id, const std::string& path) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox " + id);
  return ListRamDir(it->second.files, path);
}

Status FakeSandboxes::RemoveFile(const std::string& id, const std::string& path,
                                      bool recursive) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return Status::NotFound("no sandbox " + id);
  return RemoveRamFile(&it->second.files, path, recursive);
}

void FakeSandboxes::AppendConsole(const std::string& id, const std::string& bytes) {
  std::lock_guard l(mu_);
  if (auto it = sandboxes_.find(id); it != sandboxes_.end()) it->second.console += bytes;
}

void FakeSandboxes::RotateConsole(const std::string& id) {
  std::lock_guard l(mu_);
  if (auto it = sandboxes_.find(id); it != sandboxes_.end()) it->second.console.clear();
}

void FakeSandboxes::SetStats(const std::string& id, const SandboxStats& stats) {
  std::lock_guard l(mu_);
  if (auto it = sandboxes_.find(id); it != sandboxes_.end()) it->second.stats = stats;
}

Result<UniqueFd> FakeSandboxes::ConnectGuestPort(const std::string& id, uint16_t port) {
  ++calls_;
  std::string host;
  {
    std::lock_guard l(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return Status::NotFound("sandbox " + id + " not found");
    if (it->second.info.state != SandboxState::kRunning) {
      return Status::FailedPrecondition("sandbox " + id + " is not running");
    }
    host = it->second.guest_host;
  }
  if (host.empty()) {
    return Status::FailedPrecondition("sandbox " + id +
                                      " has no network: its guest ports cannot be reached");
  }
  return network::ConnectTcp(host, port, network::kGuestConnectTimeout);
}

void FakeSandboxes::SetGuestNetwork(const std::string& id, const std::string& host) {
  std::lock_guard l(mu_);
  if (auto it = sandboxes_.find(id); it != sandboxes_.end()) it->second.guest_host = host;
}

void FakeSandboxes::FailSandbox(const std::string& id, const std::string& message) {
  std::lock_guard l(mu_);
  if (auto it = sandboxes_.find(id); it != sandboxes_.end()) {
    it->second.info.state = SandboxState::kFailed;
    it->second.info.message = message;
  }
}

std::string FakeSandboxes::UserOfTemplate(const std::string& name) const {
  std::lock_guard l(mu_);
  for (const auto& [_, sb] : sandboxes_) {
    if (sb.info.template_name == name) return sb.info.id;
  }
  return "";
}

size_t FakeSandboxes::sandbox_count() const {
  std::lock_guard l(mu_);
  return sandboxes_.size();
}

uint32_t FakeSandboxes::file_mode(const std::string& id, const std::string& path) const {
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return 0;
  auto f = it->second.files.find(path);
  return f == it->second.files.end() ? 0 : f->second.second;
}

}  // namespace kubicle::noderuntime::server::testing
