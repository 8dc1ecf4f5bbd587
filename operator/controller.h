// The operator's engine: informers over Sandboxes, SandboxForks,
// SandboxTemplates and node heartbeat Leases feed one rate-limited work
// queue ("Sandbox:ns/name", "SandboxFork:...", "SandboxTemplate:...",
// "Node:<name>" for the heartbeat timer of NodeReconciler), and
// `workers` threads run the reconcilers. A key is never reconciled by two
// workers at once (queue semantics). Failed passes are retried with
// per-key exponential backoff; successful ones are requeued when the
// reconciler asks (expiry, stale leases). Each pass runs inside an exception
// boundary: whatever a reconciler throws becomes an error result (retried
// with backoff), an error log line and a Warning Event (ReconcileError) on
// the object, never a crash. Metrics go to the given registry.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "kube/controller_engine.h"
#include "operator/context.h"
#include "operator/fork_reconciler.h"
#include "operator/node_reconciler.h"
#include "kube/informer.h"
#include "operator/sandbox_reconciler.h"
#include "operator/template_reconciler.h"
#include "operator/workspace_reconciler.h"

namespace kubicle::op {

struct ControllerOptions {
  int workers = 4;
  OperatorConfig config;
  std::string identity = "kubicle-operator";
};

class Controller : private ObjectLister {
 public:
  Controller(kube::KubeClient* client, const kube::Clock* clock, metrics::Registry* registry,
             ControllerOptions options);
  ~Controller() override;

  // Starts informers, waits (up to `sync_timeout`) for their first list,
  // then starts the workers.
  Status Start(std::chrono::milliseconds sync_timeout = std::chrono::seconds(60));
  void Stop();
  // Before Start(): `kind` ("Sandbox", "SandboxFork", "SandboxTemplate") is
  // reconciled by `r` instead (tests).
  void ReplaceReconciler(const std::string& kind, std::unique_ptr<Reconciler> r);
  size_t QueueDepth() const { return queue_.Len(); }
  // With a FakeClock: wakes the queue after the clock was advanced (tests).
  void Poke() { queue_.Poke(); }
  uint64_t Reconciles() const { return reconciles_.load(); }

 private:
  std::optional<Json> Get(const kube::Resource& r, const std::string& key) override;
  std::vector<Json> List(const kube::Resource& r) override;
  void ForEach(const kube::Resource& r, const std::function<void(const Json&)>& fn) override;
  kube::Informer* InformerFor(const kube::Resource& r);
  void WireHandlers();
  void RegisterMetrics(metrics::Registry* registry);
  void EnqueuePendingSandboxes(const std::string& ns, const std::string& tmpl);
  // A Workspace or one of its Sandboxes changed: the Workspace (attachedTo)
  // and the Sandboxes waiting for it.
  void EnqueueWorkspace(const std::string& ns, const std::string& workspace);
  void ProcessKey(const std::string& key);
  // The pass with the exception boundary: `*threw` says what escaped.
  Result<Outcome> Reconcile(const std::string& kind, const std::string& key, std::string* threw);
  void ReportThrow(const std::string& kind, const std::string& key, const std::string& what);

  kube::KubeClient* client_;
  const kube::Clock* clock_;
  ControllerOptions options_;
  Scheduler scheduler_;
  LeaseAbsence lease_absence_;
  WorkspaceClaims workspace_claims_;
  kube::EventRecorder events_;
  kube::Informer sandboxes_, forks_, templates_, leases_, workspaces_;
  kube::ControllerEngine engine_;  // after the informers it stops
  kube::WorkQueue& queue_ = engine_.Queue();
  std::map<std::string, std::unique_ptr<Reconciler>> reconcilers_;  // by kind
  metrics::Family<metrics::Histogram>* latency_;
  metrics::Family<metrics::Counter>* results_;
  std::atomic<uint64_t> reconciles_{0};
};

}  // namespace kubicle::op
