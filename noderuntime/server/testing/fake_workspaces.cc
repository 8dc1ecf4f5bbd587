// FakeWorkspaces (fake_workspaces.h): RAM file tables with the manager's
// one-writer rule.
#include <random>

#include "noderuntime/server/testing/fake_workspaces.h"
#include "noderuntime/server/testing/ram_files.h"
#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::server::testing {

using guest::protocol::Bytes;
using guest::protocol::ByteSpan;

namespace {

Status CheckPath(const std::string& path) {
  if (path.empty() || path[0] != '/' || path.size() > kMaxWorkspacePathBytes)
    return Status::InvalidArgument("workspace path must be absolute and at most 4096 bytes");
  return Status::Ok();
}

std::string MintToken() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 64; ++i) t.push_back(kHex[rng() & 15]);
  return t;
}

}  // namespace

Result<FakeWorkspaces::Workspace*> FakeWorkspaces::DetachedLocked(
    const std::string& name) {
  auto it = workspaces_.find(name);
  if (it == workspaces_.end()) return Status::NotFound("no workspace " + name);
  if (!it->second.info.attached_to.empty())
    return Status::FailedPrecondition("workspace " + name + " is attached to " +
                                      it->second.info.attached_to);
  return &it->second;
}

Status FakeWorkspaces::Attach(const std::string& name, const std::string& holder) {
  if (name.empty()) return Status::Ok();
  std::lock_guard l(mu_);
  ASSIGN_OR_RETURN(Workspace * ws, DetachedLocked(name));
  ws->info.attached_to = holder;
  return Status::Ok();
}

void FakeWorkspaces::Release(const std::string& holder) {
  std::lock_guard l(mu_);
  for (auto& [_, ws] : workspaces_)
    if (ws.info.attached_to == holder) ws.info.attached_to.clear();
}

Result<WorkspaceInfo> FakeWorkspaces::PutWorkspace(const WorkspaceSpec& spec) {
  ++calls_;
  RETURN_IF_ERROR(ValidateId(spec.name, "workspace name"));
  if (spec.size_mib < kMinWorkspaceMiB || spec.size_mib > kMaxWorkspaceMiB)
    return Status::InvalidArgument("workspace size must be 8 MiB .. 1 TiB");
  std::lock_guard l(mu_);
  if (auto it = workspaces_.find(spec.name); it != workspaces_.end()) {
    if (it->second.info.size_mib != spec.size_mib)
      return Status::FailedPrecondition("workspace " + spec.name + " exists with " +
                                        std::to_string(it->second.info.size_mib) + " MiB");
    return it->second.info;
  }
  Workspace ws;
  ws.info.name = spec.name;
  ws.info.size_mib = spec.size_mib;
  ws.info.labels = spec.labels;
  ws.info.created_at = std::chrono::system_clock::now();
  WorkspaceInfo out = ws.info;
  if (spec.token_sha256.empty()) {
    out.token = MintToken();
    ws.token_sha256 = Sha256Hex(out.token);
  } else {
    ws.token_sha256 = spec.token_sha256;
  }
  workspaces_[spec.name] = std::move(ws);
  return out;
}

Result<WorkspaceInfo> FakeWorkspaces::GetWorkspace(const std::string& name) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = workspaces_.find(name);
  if (it == workspaces_.end()) return Status::NotFound("no workspace " + name);
  return it->second.info;
}

std::vector<WorkspaceInfo> FakeWorkspaces::ListWorkspaces() {
  ++calls_;
  std::lock_guard l(mu_);
  std::vector<WorkspaceInfo> out;
  for (const auto& [_, ws] : workspaces_) out.push_back(ws.info);
  return out;
}

Status FakeWorkspaces::DeleteWorkspace(const std::string& name) {
  ++calls_;
  std::lock_guard l(mu_);
  RETURN_IF_ERROR(DetachedLocked(name).status());
  workspaces_.erase(name);
  return Status::Ok();
}

bool FakeWorkspaces::CheckToken(const std::string& name, const std::string& token) {
  ++calls_;
  std::lock_guard l(mu_);
  auto it = workspaces_.find(name);
  return it != workspaces_.end() && !token.empty() &&
         ConstantTimeEqual(Sha256Hex(token), it->second.token_sha256);
}

Status FakeWorkspaces::ReadWorkspaceFile(const std::string& name, const std::string& path,
                                             const guest::client::FileChunkFn& on_chunk) {
  ++calls_;
  RETURN_IF_ERROR(CheckPath(path));
  Bytes data;
  {
    std::lock_guard l(mu_);
    ASSIGN_OR_RETURN(Workspace * ws, DetachedLocked(name));
    auto f = ws->files.find(path);
    if (f == ws->files.end()) return Status::NotFound("no file " + path);
    data = f->second.first;
  }
  size_t off = 0;
  do {
    const size_t n = std::min(*chunk_bytes_, data.size() - off);
    guest::client::FileChunk chunk;
    chunk.offset = off;
    chunk.data = ByteSpan(data.data() + off, n);
    if (off == 0) chunk.file_size = data.size();
    RETURN_IF_ERROR(on_chunk(chunk));
    off += n;
  } while (off < data.size());
  return Status::Ok();
}

Status FakeWorkspaces::WriteWorkspaceFile(const std::string& name, const std::string& path,
                                              ByteSpan data, uint32_t mode) {
  ++calls_;
  RETURN_IF_ERROR(CheckPath(path));
  if (data.size() > kMaxWorkspaceWriteBytes) return Status::ResourceExhausted("file too large");
  std::lock_guard l(mu_);
  ASSIGN_OR_RETURN(Workspace * ws, DetachedLocked(name));
  ws->files[path] = {Bytes(data.begin(), data.end()), mode};
  return Status::Ok();
}

Result<guest::protocol::StatReply> FakeWorkspaces::StatWorkspaceFile(const std::string& name,
                                                                         const std::string& path) {
  ++calls_;
  RETURN_IF_ERROR(CheckPath(path));
  std::lock_guard l(mu_);
  ASSIGN_OR_RETURN(Workspace * ws, DetachedLocked(name));
  return StatRamFile(ws->files, path);
}

Result<std::vector<guest::protocol::DirEntry>> FakeWorkspaces::ListWorkspaceFiles(
    const std::string& name, const std::string& path) {
  ++calls_;
  RETURN_IF_ERROR(CheckPath(path));
  std::lock_guard l(mu_);
  ASSIGN_OR_RETURN(Workspace * ws, DetachedLocked(name));
  return ListRamDir(ws->files, path);
}

Status FakeWorkspaces::RemoveWorkspaceFile(const std::string& name, const std::string& path,
                                               bool recursive) {
  ++calls_;
  RETURN_IF_ERROR(CheckPath(path));
  std::lock_guard l(mu_);
  ASSIGN_OR_RETURN(Workspace * ws, DetachedLocked(name));
  return RemoveRamFile(&ws->files, path, recursive);
}

}  // namespace kubicle::noderuntime::server::testing
