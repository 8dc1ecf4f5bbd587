#include "noderuntime/nodeagent/workspace_sync.h"

#include "common/log.h"
#include "kube/api/names.h"
#include "kube/time_format.h"
#include "noderuntime/nodeagent/object_fields.h"

namespace kubicle::noderuntime::nodeagent {

using namespace std::chrono_literals;

namespace {
constexpr auto kRetryAttached = 1s;
constexpr int kWorkers = 2;
}  // namespace

using kube::api::WorkspaceView;

WorkspaceSync::WorkspaceSync(kube::KubeClient* client, SandboxService* service, const AgentConfig& config)
    : client_(client),
      service_(service),
      config_(config),
      informer_(client, kube::WorkspaceResource(), "", kube::api::NodeSelector(config.node_name)),
      engine_({.workers = kWorkers, .resync = std::chrono::milliseconds(config.resync)}) {
  informer_.AddHandler([this](kube::WatchEventType, const Json& obj) { queue_.Add(kube::KeyOf(obj)); });
  engine_.Watch(&informer_, /*resync=*/true);
}

WorkspaceSync::~WorkspaceSync() { Stop(); }

void WorkspaceSync::Start() { (void)engine_.Start([this](const std::string& key) { Sync(key); }); }

void WorkspaceSync::Stop() { engine_.Stop(); }

std::optional<std::string> WorkspaceSync::ReadyWorkspace(const std::string& ns, const std::string& name) {
  auto obj = informer_.Get(kube::ObjectKey(ns, name));
  if (!obj) return std::nullopt;
  const kube::api::ObjectMeta meta = kube::api::ParseObjectMeta(*obj);
  if (meta.deleting) return std::nullopt;
  const std::string id = WorkspaceNodeName(meta.uid);
  auto got = service_->GetWorkspace(id);
  if (!got.ok() || got->state != WorkspaceState::kReady) return std::nullopt;
  return id;
}

void WorkspaceSync::Sync(const std::string& key) {
  auto got = informer_.Get(key);
  if (!got) return;  // gone: its disk was deleted before the finalizer went
  const WorkspaceView obj = WorkspaceView::Parse(std::move(*got));
  const std::string& uid = obj.meta.uid;
  if (uid.empty()) return;
  const std::string id = WorkspaceNodeName(uid);
  if (obj.meta.deleting) {
    Status st = service_->DeleteWorkspace(id);
    if (st.ok() || st.code() == StatusCode::kNotFound) {
      if (st.ok()) log::Info("workspace deleted", {{"workspace", key}, {"id", id}});
      return Report(obj, {"Deleted", id, "", "", "", std::nullopt});
    }
    DiskReport waiting = obj.status.has_disk ? obj.status.disk
                                             : DiskReport{"Ready", id, config_.endpoint, "", "", std::nullopt};
    if (waiting.state == "Deleted") waiting.state = "Ready";
    waiting.message = "not deleted yet: " + Bounded(st.message());
    Report(obj, waiting);
    return queue_.AddAfter(key, kRetryAttached);
  }
  const std::string& hash = obj.status.token_sha256;
  if (hash.empty()) return;  // the operator publishes it; that update requeues
  WorkspaceSpec spec;
  spec.name = id;
  spec.size_mib = static_cast<uint64_t>(std::max<int64_t>(0, obj.spec.size_mib.value_or(0)));
  spec.token_sha256 = hash;
  spec.labels[std::string(kube::api::kLabelWorkspaceUid)] = uid;
  spec.labels[std::string(kube::api::kLabelNamespace)] = obj.meta.ns;
  auto info = service_->PutWorkspace(spec);
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kUnavailable) return queue_.AddRateLimited(key);
    log::Warn("workspace failed", {{"workspace", key}, {"error", info.status().ToString()}});
    return Report(obj, {"Failed", id, "", "", Bounded(info.status().message()), std::nullopt});
  }
  if (info->state == WorkspaceState::kFailed) {
    return Report(obj, {"Failed", id, "", "", Bounded(info->message), std::nullopt});
  }
  Report(obj, {"Ready", id, config_.endpoint, info->attached_to, "", static_cast<int64_t>(info->bytes_used)});
}

void WorkspaceSync::Report(const WorkspaceView& obj, const DiskReport& report) {
  if (obj.status.has_disk && obj.status.disk == report) return;
  const std::string key = obj.meta.Key();
  auto r = client_->Patch(kube::WorkspaceResource(), obj.meta.ns, obj.meta.name, kube::PatchType::kMerge,
                          kube::api::WorkspaceDiskStatusPatch(report, std::chrono::system_clock::now()), "status");
  if (!r.ok()) {
    if (kube::IsNotFound(r.status())) return;
    log::Warn("status.disk write failed; retrying", {{"workspace", key}, {"error", r.status().ToString()}});
    return queue_.AddRateLimited(key);
  }
  queue_.Forget(key);
}

}  // namespace kubicle::noderuntime::nodeagent
