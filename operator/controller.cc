#include "operator/controller.h"

#include "common/log.h"
#include "kube/json_fields.h"
#include "operator/run_token.h"

namespace kubicle::op {

using kube::Json;
using kube::WatchEventType;

Controller::Controller(kube::KubeClient* client, const kube::Clock* clock,
                       metrics::Registry* registry, ControllerOptions options)
    : client_(client),
      clock_(clock),
      options_(std::move(options)),
      events_(client, "kubicle-operator", options_.identity, clock),
      sandboxes_(client, kube::SandboxResource()),
      forks_(client, kube::SandboxForkResource()),
      templates_(client, kube::SandboxTemplateResource()),
      leases_(client, kube::LeaseResource(), options_.config.node_lease_namespace,
              std::string(kLabelNode)),
      workspaces_(client, kube::WorkspaceResource()),
      engine_({.workers = options_.workers, .registry = registry, .metrics_prefix = "kubicle_operator"},
              clock) {
  Context ctx{client_, this, clock_, &scheduler_, &events_, options_.config, &lease_absence_,
              &workspace_claims_};
  reconcilers_["Sandbox"] = std::make_unique<SandboxReconciler>(ctx);
  reconcilers_["SandboxFork"] = std::make_unique<ForkReconciler>(ctx);
  reconcilers_["SandboxTemplate"] = std::make_unique<TemplateReconciler>(ctx);
  reconcilers_["Workspace"] = std::make_unique<WorkspaceReconciler>(ctx);
  reconcilers_["Node"] = std::make_unique<NodeReconciler>(ctx, [this](const std::string& node) {
    sandboxes_.ForEach([&](const Json& s) {
      if (Label(s, kLabelNode) == node) queue_.Add("Sandbox:" + kube::KeyOf(s));
    });
  });
  RegisterMetrics(registry);
  WireHandlers();
  for (kube::Informer* i : {&leases_, &templates_, &sandboxes_, &forks_, &workspaces_}) engine_.Watch(i);
}

void Controller::RegisterMetrics(metrics::Registry* registry) {
  latency_ = &registry->AddHistogram("kubicle_operator_reconcile_duration_seconds",
                                     "Time of one reconcile pass.", {"kind"},
                                     metrics::ExponentialBuckets(0.0005, 2, 16));
  results_ = &registry->AddCounter("kubicle_operator_reconcile_total",
                                   "Reconcile passes by kind and result.", {"kind", "result"});
  registry->AddGaugeCallback("kubicle_operator_sandboxes", "Sandboxes by phase.", {"phase"}, [this] {
    std::map<std::string, double> by_phase;
    for (const char* p : {"Pending", "Scheduled", "Starting", "Running", "Failed", "Terminating"}) {
      by_phase[p] = 0;
    }
    sandboxes_.ForEach([&](const Json& s) {
      std::string p = StatusString(s, "phase");
      by_phase[p.empty() ? "Pending" : p] += 1;
    });
    std::vector<std::pair<metrics::LabelValues, double>> out;
    for (const auto& [p, n] : by_phase) out.push_back({{p}, n});
    return out;
  });
}

Controller::~Controller() { Stop(); }

void Controller::ReplaceReconciler(const std::string& kind, std::unique_ptr<Reconciler> r) {
  reconcilers_[kind] = std::move(r);
}

kube::Informer* Controller::InformerFor(const kube::Resource& r) {
  if (r.plural == "sandboxes") return &sandboxes_;
  if (r.plural == "sandboxforks") return &forks_;
  if (r.plural == "sandboxtemplates") return &templates_;
  if (r.plural == "leases") return &leases_;
  if (r.plural == "workspaces") return &workspaces_;
  return nullptr;
}

std::optional<Json> Controller::Get(const kube::Resource& r, const std::string& key) {
  kube::Informer* inf = InformerFor(r);
  return inf ? inf->Get(key) : std::nullopt;
}

std::vector<Json> Controller::List(const kube::Resource& r) {
  kube::Informer* inf = InformerFor(r);
  return inf ? inf->List() : std::vector<Json>{};
}

void Controller::ForEach(const kube::Resource& r, const std::function<void(const Json&)>& fn) {
  if (kube::Informer* inf = InformerFor(r)) inf->ForEach(fn);
}

void Controller::EnqueuePendingSandboxes(const std::string& ns, const std::string& tmpl) {
  sandboxes_.ForEach([&](const Json& s) {
    if (!Label(s, kLabelNode).empty() || IsDeleting(s)) return;
    if (!ns.empty() && Namespace(s) != ns) return;
    if (!tmpl.empty() && ParseSandboxSpec(s, nullptr).template_name != tmpl) return;
    queue_.Add("Sandbox:" + kube::KeyOf(s));
  });
}

void Controller::EnqueueWorkspace(const std::string& ns, const std::string& workspace) {
  queue_.Add("Workspace:" + kube::ObjectKey(ns, workspace));
  sandboxes_.ForEach([&](const Json& s) {
    if (Namespace(s) == ns && Label(s, kLabelNode).empty() && !IsDeleting(s) &&
        ParseSandboxSpec(s, nullptr).workspace == workspace) {
      queue_.Add("Sandbox:" + kube::KeyOf(s));
    }
  });
}

void Controller::WireHandlers() {
  workspaces_.AddHandler([this](WatchEventType, const Json& w) {
    EnqueueWorkspace(Namespace(w), Name(w));
  });
  sandboxes_.AddHandler([this](WatchEventType, const Json& s) {
    queue_.Add("Sandbox:" + kube::KeyOf(s));
    if (std::string w = ParseSandboxSpec(s, nullptr).workspace.value_or(""); !w.empty()) {
      EnqueueWorkspace(Namespace(s), w);
    }
    if (std::string f = Label(s, kLabelForkOf); !f.empty()) {
      queue_.Add("SandboxFork:" + kube::ObjectKey(Namespace(s), f));
    }
    forks_.ForEach([&](const Json& f) {
      if (Namespace(f) == Namespace(s) && ParseSandboxForkSpec(f, nullptr).source_name == Name(s)) {
        queue_.Add("SandboxFork:" + kube::KeyOf(f));
      }
    });
  });
  forks_.AddHandler([this](WatchEventType, const Json& f) {
    queue_.Add("SandboxFork:" + kube::KeyOf(f));
  });
  templates_.AddHandler([this](WatchEventType, const Json& t) {
    queue_.Add("SandboxTemplate:" + kube::KeyOf(t));
    EnqueuePendingSandboxes(Namespace(t), Name(t));
  });
  leases_.AddHandler([this](WatchEventType, const Json& lease) {
    if (auto node = ParseNodeLease(lease, clock_->Now())) queue_.Add("Node:" + node->name);
    for (const Json& t : templates_.List()) queue_.Add("SandboxTemplate:" + kube::KeyOf(t));
    EnqueuePendingSandboxes("", "");
    workspaces_.ForEach([&](const Json& w) {
      // Placement of unplaced ones, node-gone finalization of deleting ones.
      if (Label(w, kLabelNode).empty() || IsDeleting(w)) queue_.Add("Workspace:" + kube::KeyOf(w));
    });
    sandboxes_.ForEach([&](const Json& s) {
      if (IsDeleting(s)) queue_.Add("Sandbox:" + kube::KeyOf(s));  // node-gone finalization
    });
  });
}

Status Controller::Start(std::chrono::milliseconds sync_timeout) {
  RETURN_IF_ERROR(engine_.Start([this](const std::string& key) { ProcessKey(key); }, sync_timeout));
  log::Info("controller started", {{"workers", options_.workers}});
  return Status::Ok();
}

void Controller::Stop() { engine_.Stop(); }

namespace {

const kube::Resource* ResourceOfKind(const std::string& kind) {
  if (kind == "Sandbox") return &kube::SandboxResource();
  if (kind == "SandboxFork") return &kube::SandboxForkResource();
  if (kind == "SandboxTemplate") return &kube::SandboxTemplateResource();
  if (kind == "Workspace") return &kube::WorkspaceResource();
  return nullptr;
}

}  // namespace

Result<Outcome> Controller::Reconcile(const std::string& kind, const std::string& key,
                                      std::string* threw) {
  auto it = reconcilers_.find(kind);
  if (it == reconcilers_.end()) return Status::Internal("no reconciler for kind " + kind);
  try {
    return it->second->Reconcile(key);
  } catch (const std::exception& e) {
    *threw = e.what();
  } catch (...) {
    *threw = "an exception that is not a std::exception";
  }
  if (threw->empty()) *threw = "an exception without a message";
  return Status::Internal("reconciler threw: " + *threw);
}

// Best effort, like every Event, and itself behind the boundary.
void Controller::ReportThrow(const std::string& kind, const std::string& key,
                             const std::string& what) {
  try {
    const kube::Resource* r = ResourceOfKind(kind);
    std::optional<Json> obj = r ? Get(*r, key) : std::nullopt;
    if (!obj) return;  // gone: nobody to tell
    constexpr size_t kMaxMessage = 1024;  // Event messages are for people
    std::string message = "reconcile failed, will retry: " + what;
    if (message.size() > kMaxMessage) message = message.substr(0, kMaxMessage) + "...";
    events_.Record(*obj, "Warning", "ReconcileError", message);
  } catch (...) {
    log::Error("reconcile error not recorded as an Event", {{"kind", kind}, {"key", key}});
  }
}

void Controller::ProcessKey(const std::string& qkey) {
  size_t colon = qkey.find(':');
  std::string kind = qkey.substr(0, colon);
  std::string key = qkey.substr(colon + 1);
  auto start = std::chrono::steady_clock::now();
  std::string threw;
  Result<Outcome> r = Reconcile(kind, key, &threw);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  latency_->WithLabels({kind}).Observe(secs);
  reconciles_.fetch_add(1);
  if (!threw.empty()) {
    // A bug, not a state of the world: say so loudly, then retry like any
    // error (the object may change, or the bug may depend on timing).
    results_->WithLabels({kind, "error"}).Inc();
    log::Error("reconcile threw", {{"kind", kind}, {"key", key}, {"error", threw}});
    ReportThrow(kind, key, threw);
    queue_.AddRateLimited(qkey);
    return;
  }
  if (!r.ok() && kube::IsConflict(r.status())) {
    // We read a stale copy: a newer one exists and its watch event re-queues
    // the key (the queue keeps it pending while we hold it). No backoff, so
    // a burst of fresh objects is not throttled by the rate limiter; the
    // delayed add is only a backstop.
    results_->WithLabels({kind, "conflict"}).Inc();
    log::Debug("reconcile conflict", {{"kind", kind}, {"key", key}});
    queue_.Forget(qkey);
    queue_.AddAfter(qkey, std::chrono::seconds(1));
    return;
  }
  if (!r.ok()) {
    results_->WithLabels({kind, "error"}).Inc();
    log::Warn("reconcile failed", {{"kind", kind}, {"key", key}, {"error", r.status().ToString()}});
    queue_.AddRateLimited(qkey);
    return;
  }
  results_->WithLabels({kind, "success"}).Inc();
  queue_.Forget(qkey);
  if (r->requeue_after) queue_.AddAfter(qkey, *r->requeue_after);
}

}  // namespace kubicle::op
