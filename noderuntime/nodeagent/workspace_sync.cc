#include "noderuntime/nodeagent/workspace_sync.h"

#include "common/log.h"
#include "kube/time_format.h"
#include "noderuntime/nodeagent/object_fields.h"

namespace kubicle::noderuntime::nodeagent {

using namespace std::chrono_literals;

namespace {
constexpr auto kRetryAttached = 1s;
bool IsDeleting(const Json& obj) { return !At(obj, {"metadata", "deletionTimestamp"}).is_null(); }
}  // namespace

std::optional<DiskReport> ReportedDisk(const Json& ws) {
  const Json& d = At(ws, {"status", "disk"});
  if (!d.is_object()) return std::nullopt;
  DiskReport r{StrAt(d, {"state"}), StrAt(d, {"id"}), StrAt(d, {"endpoint"}), StrAt(d, {"attachedTo"}),
               StrAt(d, {"message"}), std::nullopt};
  if (kube::IsInt64(At(d, {"bytesUsed"}))) r.bytes_used = static_cast<uint64_t>(IntAt(d, {"bytesUsed"}));
  return r;
}

Json DiskStatusPatch(const DiskReport& r, kube::TimePoint now) {
  auto or_null = [](const std::string& s) { return s.empty() ? Json() : Json(s); };
  Json disk = {{"state", r.state}, {"lastUpdateTime", kube::FormatTime(now)},
               {"id", or_null(r.id)}, {"endpoint", or_null(r.endpoint)},
               {"attachedTo", or_null(r.attached_to)}, {"message", or_null(r.message)},
               {"bytesUsed", r.bytes_used ? Json(static_cast<int64_t>(*r.bytes_used)) : Json()}};
  return {{"status", {{"disk", disk}}}};
}

WorkspaceSync::WorkspaceSync(kube::KubeClient* client, SandboxService* service, const AgentConfig& config)
    : client_(client),
      service_(service),
      config_(config),
      informer_(client, kube::WorkspaceResource(), "", "kubicle.dev/node=" + config.node_name) {
  informer_.AddHandler([this](kube::WatchEventType, const Json& obj) { queue_.Add(kube::KeyOf(obj)); });
}

WorkspaceSync::~WorkspaceSync() { Stop(); }

void WorkspaceSync::Start() {
  informer_.Start();
  for (int i = 0; i < 2; ++i) workers_.emplace_back([this] { Work(); });
  background_ = std::thread([this] { Background(); });
}

void WorkspaceSync::Stop() {
  {
    std::lock_guard l(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (background_.joinable()) background_.join();
  queue_.ShutDown();
  for (auto& t : workers_) t.join();
  workers_.clear();
  informer_.Stop();
}

void WorkspaceSync::Work() {
  while (auto key = queue_.Get()) {
    Sync(*key);
    queue_.Done(*key);
  }
}

void WorkspaceSync::Background() {
  std::unique_lock l(stop_mu_);
  while (!stopping_) {
    l.unlock();
    if (informer_.HasSynced()) informer_.ForEach([this](const Json& o) { queue_.Add(kube::KeyOf(o)); });
    l.lock();
    stop_cv_.wait_for(l, informer_.HasSynced() ? std::chrono::milliseconds(config_.resync) : 100ms,
                      [this] { return stopping_; });
  }
}

std::optional<std::string> WorkspaceSync::ReadyWorkspace(const std::string& ns, const std::string& name) {
  auto obj = informer_.Get(kube::ObjectKey(ns, name));
  if (!obj || IsDeleting(*obj)) return std::nullopt;
  const std::string id = WorkspaceNodeName(StrAt(*obj, {"metadata", "uid"}));
  auto got = service_->GetWorkspace(id);
  if (!got.ok() || got->state != WorkspaceState::kReady) return std::nullopt;
  return id;
}

void WorkspaceSync::Sync(const std::string& key) {
  auto obj = informer_.Get(key);
  if (!obj) return;  // gone: its disk was deleted before the finalizer went
  const std::string uid = StrAt(*obj, {"metadata", "uid"});
  if (uid.empty()) return;
  const std::string id = WorkspaceNodeName(uid);
  if (IsDeleting(*obj)) {
    Status st = service_->DeleteWorkspace(id);
    if (st.ok() || st.code() == StatusCode::kNotFound) {
      if (st.ok()) log::Info("workspace deleted", {{"workspace", key}, {"id", id}});
      return Report(key, *obj, {"Deleted", id, "", "", "", std::nullopt});
    }
    auto cur = ReportedDisk(*obj);
    DiskReport waiting = cur ? *cur : DiskReport{"Ready", id, config_.endpoint, "", "", std::nullopt};
    if (waiting.state == "Deleted") waiting.state = "Ready";
    waiting.message = "not deleted yet: " + Bounded(st.message());
    Report(key, *obj, waiting);
    return queue_.AddAfter(key, kRetryAttached);
  }
  const std::string hash = StrAt(*obj, {"status", "tokenSha256"});
  if (hash.empty()) return;  // the operator publishes it; that update requeues
  WorkspaceSpec spec;
  spec.name = id;
  spec.size_mib = static_cast<uint64_t>(std::max<int64_t>(0, IntAt(*obj, {"spec", "sizeMiB"})));
  spec.token_sha256 = hash;
  spec.labels["kubicle.dev/workspace-uid"] = uid;
  spec.labels["kubicle.dev/namespace"] = StrAt(*obj, {"metadata", "namespace"});
  auto info = service_->PutWorkspace(spec);
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kUnavailable) return queue_.AddRateLimited(key);
    log::Warn("workspace failed", {{"workspace", key}, {"error", info.status().ToString()}});
    return Report(key, *obj, {"Failed", id, "", "", Bounded(info.status().message()), std::nullopt});
  }
  if (info->state == WorkspaceState::kFailed) {
    return Report(key, *obj, {"Failed", id, "", "", Bounded(info->message), std::nullopt});
  }
  Report(key, *obj, {"Ready", id, config_.endpoint, info->attached_to, "", info->bytes_used});
}

void WorkspaceSync::Report(const std::string& key, const Json& obj, const DiskReport& report) {
  if (auto cur = ReportedDisk(obj); cur && *cur == report) return;
  auto r = client_->Patch(kube::WorkspaceResource(), StrAt(obj, {"metadata", "namespace"}),
                          StrAt(obj, {"metadata", "name"}), kube::PatchType::kMerge,
                          DiskStatusPatch(report, std::chrono::system_clock::now()), "status");
  if (!r.ok()) {
    if (kube::IsNotFound(r.status())) return;
    log::Warn("status.disk write failed; retrying", {{"workspace", key}, {"error", r.status().ToString()}});
    return queue_.AddRateLimited(key);
  }
  queue_.Forget(key);
}

}  // namespace kubicle::noderuntime::nodeagent
