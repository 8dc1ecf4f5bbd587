// Suspender (suspender.h): suspend and resume of a sandbox, and their
// re-adoption.
#include "noderuntime/manager/suspender.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "snapshot/meta.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

constexpr char kSuspendDir[] = "/suspend";
// What a snapshot holds besides guest RAM (state, disk index, meta).
constexpr uint64_t kSnapshotOverheadBytes = 1 << 20;

std::string SuspendPath(const std::string& sandbox_dir) { return sandbox_dir + kSuspendDir; }

// Bytes the files under `dir` take on disk (the memory file is sparse).
uint64_t DiskBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

// The temporary directories SnapshotDir::Write leaves when it dies
// mid-write (".suspend.tmp-XXXXXX").
void RemoveSnapshotTemps(const std::string& sandbox_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(sandbox_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".suspend.tmp-", 0) == 0) (void)RemoveTree(e.path().string());
  }
}

// A layer file kubicle-vmm made in a layer directory: an overlay or frozen
// layer "<vm>.disk<slot>.<hex>.layer", or a flatten's "....layer.tmp".
bool IsLayerFile(const std::string& name) {
  return name.find(".disk") != std::string::npos &&
         (name.ends_with(".layer") || name.ends_with(".layer.tmp"));
}

std::string NotSuspendable(const SandboxInfo& info, const char* verb) {
  return "sandbox '" + info.id + "' is " + SandboxStateName(info.state) + ": only a " +
         (std::string(verb) == "suspended" ? "Running" : "Suspended") + " sandbox can be " + verb +
         (info.message.empty() ? "" : " (" + info.message + ")");
}

}  // namespace

Result<uint64_t> Suspender::ReserveSuspendDisk(const ManagedSandbox& sb) {
  // The memory file holds at most the guest's RAM (it is sparse: often far
  // less); the exact size replaces this once it is written.
  const uint64_t need = (sb.shape.mem_mib << 20) + kSnapshotOverheadBytes;
  struct statvfs fsst;
  if (::statvfs(sb.dir.c_str(), &fsst) == 0) {
    const uint64_t free = static_cast<uint64_t>(fsst.f_bavail) * fsst.f_frsize;
    if (free < need)
      return Status::ResourceExhausted("not enough free disk for the suspend snapshot: " +
                                       std::to_string(free >> 20) + " MiB free in " + sb.dir + ", " +
                                       std::to_string(need >> 20) + " MiB needed");
  }
  if (!o_.suspend_disk->TryReserve(need))
    return Status::ResourceExhausted(
        "node suspend disk is full: " + std::to_string(o_.suspend_disk->used() >> 20) + " of " +
        std::to_string(o_.suspend_disk->total() >> 20) +
        " MiB held by suspended sandboxes; this one needs up to " + std::to_string(need >> 20) +
        " MiB (--capacity-suspend-disk-mib)");
  return need;
}

Result<SandboxInfo> Suspender::Suspend(const std::shared_ptr<ManagedSandbox>& sb) {
  const std::string id = sb->rec.info.id;  // never changes
  std::lock_guard op(sb->op_mu);  // one lifecycle operation at a time
  std::string control;
  {
    std::lock_guard l(sb->mu);
    if (sb->removed) return Status::NotFound("no sandbox '" + id + "'");
    if (sb->rec.info.state == SandboxState::kSuspended) return sb->rec.info;
    if (sb->rec.info.state != SandboxState::kRunning || !sb->vmm || sb->exited)
      return Status::FailedPrecondition(NotSuspendable(sb->rec.info, "suspended"));
    control = sb->rec.control_path;
  }
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const uint64_t reserved, ReserveSuspendDisk(*sb));
  const std::string snap = SuspendPath(sb->dir);
  vmm::control::ControlClient ctl(control);
  auto written = ctl.Snapshot({.dir = snap, .resume = false}, 300s);
  if (!written.ok()) {
    // The VMM resumes a VM whose snapshot failed; a call that timed out may
    // still be writing: resume waits for it (one command at a time), then
    // its snapshot is discarded.
    (void)ctl.Resume(300s);
    (void)RemoveTree(snap);
    o_.suspend_disk->Release(reserved);
    log::Warn("sandbox suspend failed", {{"sandbox", id}, {"error", written.status().ToString()}});
    return written.status().WithContext("suspend");
  }
  const uint64_t bytes = DiskBytes(snap);
  o_.suspend_disk->Release(reserved);
  o_.suspend_disk->ForceReserve(bytes);
  Status st;
  {
    std::lock_guard l(sb->mu);
    SandboxInfo& info = sb->rec.info;
    info.state = SandboxState::kSuspended;
    info.suspended_at = o_.clock();
    info.suspended_bytes = bytes;
    sb->holds_suspend_disk = true;
    // The commit point: from this record on, the snapshot is the sandbox.
    st = o_.supervisor->Persist(*sb);
    if (!st.ok()) {
      info.state = SandboxState::kRunning;
      info.suspended_at.reset();
      info.suspended_bytes = 0;
      sb->holds_suspend_disk = false;
    }
  }
  if (!st.ok()) {
    (void)ctl.Resume(30s);
    (void)RemoveTree(snap);
    o_.suspend_disk->Release(bytes);
    return st.WithContext("suspend: record");
  }
  o_.supervisor->LetGoOfVm(*sb, VmSupervisor::Stop::kGraceful);
  CollectLayers(*sb);
  o_.suspend_seconds->WithLabels({}).Observe(SecondsSince(t0));
  std::lock_guard l(sb->mu);
  log::Info("sandbox suspended", {{"sandbox", id},
                                  {"template", sb->rec.info.template_name},
                                  {"bytes", bytes},
                                  {"ms", SecondsSince(t0) * 1000}});
  return sb->rec.info;
}

Result<SandboxInfo> Suspender::Resume(const std::shared_ptr<ManagedSandbox>& sb) {
  const std::string id = sb->rec.info.id;  // never changes
  std::lock_guard op(sb->op_mu);
  {
    std::lock_guard l(sb->mu);
    if (sb->removed) return Status::NotFound("no sandbox '" + id + "'");
    if (sb->rec.info.state == SandboxState::kRunning) return sb->rec.info;
    if (sb->rec.info.state != SandboxState::kSuspended)
      return Status::FailedPrecondition(NotSuspendable(sb->rec.info, "resumed"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  StepTimes steps;
  const std::string snap = SuspendPath(sb->dir);
  Status st = o_.starter->StartFromSuspend(sb, snap, &steps);
  uint64_t freed = 0;
  if (st.ok()) {
    std::lock_guard l(sb->mu);
    SandboxInfo& info = sb->rec.info;  // FinishStart made it Running
    freed = info.suspended_bytes;
    info.suspended_at.reset();
    info.suspended_bytes = 0;
    st = o_.supervisor->Persist(*sb);
    if (!st.ok()) {
      info.suspended_bytes = freed;
      info.suspended_at = o_.clock();
    }
  }
  if (!st.ok()) {
    AbortResume(sb);
    CollectLayers(*sb);  // the killed VM's overlay
    log::Warn("sandbox resume failed", {{"sandbox", id}, {"error", st.ToString()}});
    return st.WithContext("resume");
  }
  // The new VM maps the memory file MAP_PRIVATE: it keeps the pages it
  // still needs after the name is gone.
  Status rm = RemoveTree(snap);
  if (!rm.ok()) log::Warn("suspend snapshot removal failed", {{"sandbox", id}, {"error", rm.ToString()}});
  {
    std::lock_guard l(sb->mu);
    if (sb->holds_suspend_disk) o_.suspend_disk->Release(freed);
    sb->holds_suspend_disk = false;
  }
  o_.resume_seconds->WithLabels({}).Observe(SecondsSince(t0));
  std::lock_guard l(sb->mu);
  log::Info("sandbox resumed", {{"sandbox", id},
                                {"template", sb->rec.info.template_name},
                                {"ms", SecondsSince(t0) * 1000},
                                {"steps_ms", steps.text()}});
  return sb->rec.info;
}

void Suspender::AbortResume(const std::shared_ptr<ManagedSandbox>& sb) {
  o_.supervisor->LetGoOfVm(*sb, VmSupervisor::Stop::kKill);
  std::lock_guard l(sb->mu);
  // The record on disk still says Suspended: nothing was committed.
  sb->rec.info.state = SandboxState::kSuspended;
}

bool Suspender::MayHaveForkDescendants(const std::string& id) {
  std::map<std::string, std::string> parent;  // id -> fork_of
  for (const auto& s : o_.table->All()) {
    std::lock_guard l(s->mu);
    if (!s->removed) parent[s->rec.info.id] = s->rec.info.fork_of;
  }
  for (const auto& [child, p0] : parent) {
    std::string p = p0;
    for (size_t depth = 0; !p.empty() && depth <= parent.size(); ++depth) {
      if (p == id) return true;
      auto it = parent.find(p);
      // An ancestor that is gone may have been forked from `id` too: its
      // children's chains can still name our layers.
      if (it == parent.end()) return true;
      p = it->second;
    }
  }
  return false;
}

void Suspender::CollectLayers(const ManagedSandbox& sb) {
  const std::string snap = SuspendPath(sb.dir);
  auto text = ReadFileToString(snap + "/disk");
  if (!text.ok()) return;  // no snapshot, nothing to keep by: keep everything
  auto disks = snapshot::ParseDiskIndex(*text);
  if (!disks.ok()) {
    log::Warn("suspend snapshot disk index unreadable: layers kept",
              {{"sandbox", sb.rec.info.id}, {"error", disks.status().ToString()}});
    return;
  }
  if (MayHaveForkDescendants(sb.rec.info.id)) return;  // their chains may name our layers
  std::set<std::string> keep;
  for (const snapshot::DiskIndexEntry& d : *disks)
    for (const snapshot::LayerRef& l : d.chain.layers) keep.insert(fs::path(l.path).lexically_normal().string());
  std::error_code ec;
  size_t removed = 0;
  for (const auto& e : fs::directory_iterator(sb.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec) || !IsLayerFile(name)) continue;
    if (keep.count(e.path().lexically_normal().string())) continue;
    if (::unlink(e.path().c_str()) == 0) ++removed;
  }
  if (removed > 0) log::Info("disk layers collected", {{"sandbox", sb.rec.info.id}, {"removed", removed}});
}

void Suspender::CleanUpUnfinishedSuspend(ManagedSandbox& sb) {
  RemoveSnapshotTemps(sb.dir);
  const std::string snap = SuspendPath(sb.dir);
  if (::access(snap.c_str(), F_OK) != 0) return;
  // The record says Running: either a suspend died before its record (the
  // VM may be paused after its snapshot) or a resume died after its record
  // (the snapshot was not removed yet). The VM is the sandbox either way.
  vmm::control::ControlClient ctl(sb.rec.control_path);
  auto status = ctl.GetStatus(2s);
  if (status.ok() && status->state == vmm::control::VmState::kPaused) (void)ctl.Resume(5s);
  (void)RemoveTree(snap);
  log::Info("discarded an unfinished suspend snapshot", {{"sandbox", sb.rec.info.id}});
}

Status Suspender::AdoptSuspended(ManagedSandbox& sb) {
  RemoveSnapshotTemps(sb.dir);
  ::unlink(sb.rec.control_path.c_str());
  ::unlink(sb.rec.vsock_path.c_str());
  if (::access((SuspendPath(sb.dir) + "/state").c_str(), R_OK) != 0)
    return Status::DataLoss("its suspend snapshot is missing from " + SuspendPath(sb.dir));
  RETURN_IF_ERROR(o_.networks->Adopt(sb));
  sb.rec.info.vmm_pid = 0;
  sb.rec.pid_start_time = 0;
  sb.holds_cid = true;
  o_.suspend_disk->ForceReserve(sb.rec.info.suspended_bytes);
  sb.holds_suspend_disk = true;
  sb.exited = true;
  CollectLayers(sb);  // a resume that died mid-way left its VM's overlay
  return Status::Ok();
}

}  // namespace kubicle::noderuntime
