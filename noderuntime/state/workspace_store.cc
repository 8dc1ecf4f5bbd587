#include "noderuntime/state/workspace_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>

#include "common/log.h"
#include "common/run_tool.h"
#include "common/sha256.h"
#include "noderuntime/node_util.h"

namespace kubicle::noderuntime {

Result<std::unique_ptr<WorkspaceStore>> WorkspaceStore::Open(WorkspaceStoreOptions options) {
  if (!options.clock) options.clock = [] { return std::chrono::system_clock::now(); };
  RETURN_IF_ERROR(MakePrivateDir(options.dir, 0700));
  std::unique_ptr<WorkspaceStore> s(new WorkspaceStore(std::move(options)));
  RETURN_IF_ERROR(s->Load());
  return s;
}

std::string WorkspaceStore::ImagePath(const std::string& name) const {
  return options_.dir + "/" + name + "/disk.img";
}

Status WorkspaceStore::Load() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(options_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !ValidateId(name, "workspace").ok()) continue;
    const std::string dir = e.path().string();
    auto text = ReadFileToString(dir + "/record.json");
    if (!text.ok()) {
      // A Put that did not finish: it never answered, so nobody has it.
      log::Warn("removing unfinished workspace", {{"workspace", name}});
      (void)RemoveTree(dir);
      continue;
    }
    auto ws = std::make_shared<Workspace>();
    auto rec = DecodeWorkspaceRecord(*text);
    if (!rec.ok()) {
      ws->rec.info.name = name;
      ws->rec.info.state = WorkspaceState::kFailed;
      ws->rec.info.message = "its record cannot be read: " + rec.status().message();
    } else {
      ws->rec = std::move(*rec);
      if (ws->rec.info.name != name) {
        ws->rec.info.name = name;
        ws->rec.info.state = WorkspaceState::kFailed;
        ws->rec.info.message = "its record names another workspace";
      } else if (::access(ImagePath(name).c_str(), R_OK | W_OK) != 0) {
        ws->rec.info.state = WorkspaceState::kFailed;
        ws->rec.info.message = "its disk image is missing";
      }
    }
    workspaces_[name] = std::move(ws);
  }
  if (ec) return Status::FromErrno("listing " + options_.dir, ec.value());
  return Status::Ok();
}

uint64_t WorkspaceStore::total_mib() const {
  std::lock_guard l(mu_);
  uint64_t sum = 0;
  for (const auto& [_, ws] : workspaces_) sum += ws->rec.info.size_mib;
  return sum;
}

WorkspaceInfo WorkspaceStore::InfoLocked(const Workspace& ws) const {
  WorkspaceInfo info = ws.rec.info;
  struct stat st {};
  if (::stat(ImagePath(info.name).c_str(), &st) == 0) info.bytes_used = uint64_t(st.st_blocks) * 512;
  return info;
}

Status WorkspaceStore::MakeImage(const std::string& path, uint64_t size_mib) {
  // A sparse file of the size first: mke2fs then writes only metadata.
  {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) return Status::FromErrno("creating " + path);
    if (::ftruncate(fd.get(), static_cast<off_t>(size_mib << 20)) != 0)
      return Status::FromErrno("sizing " + path);
  }
  // No lazy init: the host never runs the kernel thread that would finish
  // it, and the guest's would write behind a detach.
  RETURN_IF_ERROR(RunTool({options_.mke2fs, "-q", "-F", "-t", "ext4", "-m", "0", "-E",
                           "lazy_itable_init=0,lazy_journal_init=0,nodiscard", "-L", "workspace",
                           path},
                          path + ".mke2fs.log"));
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd || ::fsync(fd.get()) != 0) return Status::FromErrno("syncing " + path);
  return Status::Ok();
}

Result<WorkspaceInfo> WorkspaceStore::Put(const WorkspaceSpec& spec) {
  RETURN_IF_ERROR(ValidateId(spec.name, "workspace name"));
  if (spec.size_mib < kMinWorkspaceMiB || spec.size_mib > kMaxWorkspaceMiB)
    return Status::InvalidArgument("workspace size must be " + std::to_string(kMinWorkspaceMiB) +
                                   " MiB .. 1 TiB, not " + std::to_string(spec.size_mib) + " MiB");
  if (!spec.token_sha256.empty() && !IsSha256Hex(spec.token_sha256))
    return Status::InvalidArgument("workspace token hash is not 64 lowercase hex digits");
  RETURN_IF_ERROR(ValidateLabels(spec.labels));
  std::lock_guard put(put_mu_);
  uint64_t total = 0;
  {
    std::lock_guard l(mu_);
    if (auto it = workspaces_.find(spec.name); it != workspaces_.end()) {
      const WorkspaceInfo& have = it->second->rec.info;
      if (have.size_mib != spec.size_mib)
        return Status::FailedPrecondition("workspace " + spec.name + " exists with " +
                                          std::to_string(have.size_mib) + " MiB, not " +
                                          std::to_string(spec.size_mib) +
                                          " MiB (workspaces do not grow)");
      return InfoLocked(*it->second);
    }
    for (const auto& [_, ws] : workspaces_) total += ws->rec.info.size_mib;
  }
  if (options_.budget_mib && total + spec.size_mib > options_.budget_mib)
    return Status::ResourceExhausted("workspace budget exceeded: " + std::to_string(total) +
                                     " of " + std::to_string(options_.budget_mib) +
                                     " MiB in use; this workspace needs " +
                                     std::to_string(spec.size_mib) + " MiB");
  struct statvfs vfs {};
  if (::statvfs(options_.dir.c_str(), &vfs) == 0) {
    const uint64_t free_mib = (uint64_t(vfs.f_bavail) * vfs.f_frsize) >> 20;
    if (spec.size_mib > free_mib)
      return Status::ResourceExhausted("the node's disk has " + std::to_string(free_mib) +
                                       " MiB free; this workspace needs " +
                                       std::to_string(spec.size_mib) + " MiB");
  }
  const std::string dir = options_.dir + "/" + spec.name;
  (void)RemoveTree(dir);  // what an unfinished Put left
  RETURN_IF_ERROR(MakeDirs(dir));
  auto ws = std::make_shared<Workspace>();
  WorkspaceInfo& info = ws->rec.info;
  info.name = spec.name;
  info.size_mib = spec.size_mib;
  info.labels = spec.labels;
  info.created_at = options_.clock();
  std::string token;
  if (spec.token_sha256.empty()) {
    token = RandomHex(32);
    ws->rec.token_sha256 = Sha256Hex(token);
  } else {
    ws->rec.token_sha256 = spec.token_sha256;
  }
  Status st = MakeImage(dir + "/disk.img.tmp", spec.size_mib);
  if (st.ok() && ::rename((dir + "/disk.img.tmp").c_str(), ImagePath(spec.name).c_str()) != 0)
    st = Status::FromErrno("renaming the workspace image");
  if (st.ok()) st = AtomicWriteFile(dir + "/record.json", EncodeWorkspaceRecord(ws->rec));
  if (!st.ok()) {
    (void)RemoveTree(dir);
    return st;
  }
  log::Info("workspace created", {{"workspace", spec.name}, {"size_mib", spec.size_mib}});
  std::lock_guard l(mu_);
  WorkspaceInfo out = InfoLocked(*ws);
  out.token = token;
  workspaces_[spec.name] = std::move(ws);
  return out;
}

std::shared_ptr<WorkspaceStore::Workspace> WorkspaceStore::Find(const std::string& name) {
  std::lock_guard l(mu_);
  auto it = workspaces_.find(name);
  return it == workspaces_.end() ? nullptr : it->second;
}

Result<WorkspaceInfo> WorkspaceStore::Get(const std::string& name) {
  std::lock_guard l(mu_);
  auto it = workspaces_.find(name);
  if (it == workspaces_.end()) return Status::NotFound("no workspace '" + name + "'");
  return InfoLocked(*it->second);
}

std::vector<WorkspaceInfo> WorkspaceStore::List() {
  std::lock_guard l(mu_);
  std::vector<WorkspaceInfo> out;
  for (const auto& [_, ws] : workspaces_) out.push_back(InfoLocked(*ws));
  return out;
}

bool WorkspaceStore::CheckToken(const std::string& name, const std::string& token) {
  std::string want;
  {
    std::lock_guard l(mu_);
    auto it = workspaces_.find(name);
    if (it == workspaces_.end()) return false;
    want = it->second->rec.token_sha256;
  }
  return !want.empty() && !token.empty() && ConstantTimeEqual(Sha256Hex(token), want);
}

Status WorkspaceStore::Delete(const std::string& name) {
  auto ws = Find(name);
  if (!ws) return Status::NotFound("no workspace '" + name + "'");
  std::unique_lock op(ws->op_mu, options_.attach_wait);
  if (!op.owns_lock()) return Status::FailedPrecondition("workspace " + name + " is busy with a file call");
  {
    std::lock_guard l(mu_);
    if (ws->deleted) return Status::NotFound("no workspace '" + name + "'");
    if (!ws->rec.info.attached_to.empty())
      return Status::FailedPrecondition("workspace " + name + " is attached to " +
                                        ws->rec.info.attached_to + ": delete that first");
    ws->deleted = true;
  }
  // The record first: a crash then leaves a directory without one, which
  // the next Open removes.
  const std::string dir = options_.dir + "/" + name;
  if (::unlink((dir + "/record.json").c_str()) != 0 && errno != ENOENT) {
    std::lock_guard l(mu_);
    ws->deleted = false;
    return Status::FromErrno("removing the record of workspace " + name);
  }
  Status st = RemoveTree(dir);
  {
    std::lock_guard l(mu_);
    workspaces_.erase(name);
  }
  log::Info("workspace deleted", {{"workspace", name}});
  return st;
}

Result<std::string> WorkspaceStore::Attach(const std::string& name, const std::string& holder) {
  auto ws = Find(name);
  if (!ws) return Status::NotFound("no workspace '" + name + "' on this node");
  std::unique_lock op(ws->op_mu, options_.attach_wait);
  if (!op.owns_lock())
    return Status::FailedPrecondition("workspace " + name + " is busy with a host file call");
  std::lock_guard l(mu_);
  if (ws->deleted) return Status::NotFound("no workspace '" + name + "' on this node");
  WorkspaceInfo& info = ws->rec.info;
  if (info.state != WorkspaceState::kReady)
    return Status::FailedPrecondition("workspace " + name + " is " + WorkspaceStateName(info.state) +
                                      ": " + info.message);
  if (!info.attached_to.empty() && info.attached_to != holder)
    return Status::FailedPrecondition("workspace " + name + " is attached to " + info.attached_to +
                                      " (one writer at a time)");
  info.attached_to = holder;
  return ImagePath(name);
}

void WorkspaceStore::Release(const std::string& name, const std::string& holder) {
  std::lock_guard l(mu_);
  auto it = workspaces_.find(name);
  if (it != workspaces_.end() && it->second->rec.info.attached_to == holder)
    it->second->rec.info.attached_to.clear();
}

std::string WorkspaceStore::Holder(const std::string& name) {
  std::lock_guard l(mu_);
  auto it = workspaces_.find(name);
  return it == workspaces_.end() ? "" : it->second->rec.info.attached_to;
}

Status WorkspaceStore::WithDetached(const std::string& name, const std::function<Status()>& fn) {
  auto ws = Find(name);
  if (!ws) return Status::NotFound("no workspace '" + name + "'");
  std::lock_guard op(ws->op_mu);
  {
    std::lock_guard l(mu_);
    if (ws->deleted) return Status::NotFound("no workspace '" + name + "'");
    if (ws->rec.info.state != WorkspaceState::kReady)
      return Status::FailedPrecondition("workspace " + name + " is Failed: " + ws->rec.info.message);
    if (!ws->rec.info.attached_to.empty())
      return Status::FailedPrecondition("workspace " + name + " is attached to " +
                                        ws->rec.info.attached_to +
                                        ": its files are the guest's while it runs (one writer); use "
                                        "the sandbox's own file calls, or delete it first");
  }
  RETURN_IF_ERROR(ReplayJournalIfNeeded(name));
  return fn();
}

// A VM that stopped without unmounting the workspace (a VMM crash) leaves
// its last metadata in the journal: replayed here, confined, before the
// helper reads a stale file system (ext4/journal_replay.h).
Status WorkspaceStore::ReplayJournalIfNeeded(const std::string& name) {
  const std::string image = ImagePath(name);
  ASSIGN_OR_RETURN(bool needed, ext4::NeedsJournalReplay(image));
  if (!needed) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = ext4::ReplayJournal(image, options_.replay);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) {
    log::Warn("workspace journal replay failed", {{"workspace", name}, {"error", st.ToString()}});
    return st.WithContext("workspace " + name);
  }
  log::Info("workspace journal replayed", {{"workspace", name}, {"ms", ms}});
  return Status::Ok();
}

Status WorkspaceStore::ReadFile(const std::string& name, const std::string& path,
                                const guest::client::FileChunkFn& on_chunk) {
  return WithDetached(name, [&] { return helper_.Read(ImagePath(name), path, on_chunk); });
}

Status WorkspaceStore::WriteFile(const std::string& name, const std::string& path,
                                 guest::protocol::ByteSpan data, uint32_t mode) {
  return WithDetached(name, [&] { return helper_.Write(ImagePath(name), path, data, mode); });
}

Result<guest::protocol::StatReply> WorkspaceStore::StatFile(const std::string& name,
                                                            const std::string& path) {
  guest::protocol::StatReply out;
  RETURN_IF_ERROR(WithDetached(name, [&]() -> Status {
    ASSIGN_OR_RETURN(out, helper_.Stat(ImagePath(name), path));
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<guest::protocol::DirEntry>> WorkspaceStore::ListFiles(const std::string& name,
                                                                         const std::string& path) {
  std::vector<guest::protocol::DirEntry> out;
  RETURN_IF_ERROR(WithDetached(name, [&]() -> Status {
    ASSIGN_OR_RETURN(out, helper_.List(ImagePath(name), path, kMaxWorkspaceListEntries));
    return Status::Ok();
  }));
  return out;
}

Status WorkspaceStore::RemoveFile(const std::string& name, const std::string& path, bool recursive) {
  return WithDetached(name, [&] { return helper_.Remove(ImagePath(name), path, recursive); });
}

}  // namespace kubicle::noderuntime
