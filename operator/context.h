// What every reconciler needs: the client for writes, a lister for reads
// (informer caches in the operator; the client itself in unit tests), the
// injected clock, the scheduler, an optional event recorder, and settings.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "operator/api.h"
#include "kube/clock.h"
#include "kube/event_recorder.h"
#include "kube/kube_client.h"
#include "operator/nodes.h"
#include "operator/scheduler.h"
#include "operator/workspace_claims.h"

namespace kubicle::op {

// Read access to current objects of a resource ("ns/name" keys).
class ObjectLister {
 public:
  virtual ~ObjectLister() = default;
  virtual std::optional<Json> Get(const kube::Resource& r, const std::string& key) = 0;
  virtual std::vector<Json> List(const kube::Resource& r) = 0;
  // Visits every object without copies where the lister can (informers).
  virtual void ForEach(const kube::Resource& r, const std::function<void(const Json&)>& fn) {
    for (const Json& o : List(r)) fn(o);
  }
};

// Reads straight from a KubeClient: always fresh; used by unit tests.
class ClientLister final : public ObjectLister {
 public:
  explicit ClientLister(kube::KubeClient* c, std::string lease_namespace = {})
      : client_(c), lease_ns_(std::move(lease_namespace)) {}
  std::optional<Json> Get(const kube::Resource& r, const std::string& key) override;
  std::vector<Json> List(const kube::Resource& r) override;

 private:
  kube::KubeClient* client_;
  std::string lease_ns_;
};

struct OperatorConfig {
  kube::Duration default_ttl = std::chrono::hours(1);  // zero: never expire
  kube::Duration node_gone_grace = std::chrono::seconds(120);
  kube::Duration unschedulable_retry = std::chrono::seconds(5);
  std::string node_lease_namespace = "kubicle-node-lease";
  int64_t default_memory_mib = 256;
};

struct Context {
  kube::KubeClient* client;
  ObjectLister* lister;
  const kube::Clock* clock;
  Scheduler* scheduler;
  kube::EventRecorder* events = nullptr;  // optional
  OperatorConfig config;
  // Shared by every pass: when each node was first seen without a Lease.
  LeaseAbsence* lease_absence = nullptr;
  // Shared by every pass: which Sandbox is being placed with each Workspace.
  WorkspaceClaims* workspace_claims = nullptr;

  void Event(const Json& obj, std::string_view type, std::string_view reason,
             std::string_view message) const {
    if (events) events->Record(obj, type, reason, message);
  }
};

// Outcome of one reconcile pass: when to look again even if nothing changes.
struct Outcome {
  std::optional<kube::Duration> requeue_after;
  void RequeueWithin(kube::Duration d) {
    if (d < kube::Duration::zero()) d = kube::Duration::zero();
    if (!requeue_after || d < *requeue_after) requeue_after = d;
  }
};

// One kind's reconcile pass over the object with key "namespace/name". An
// error is retried with backoff. Reconcilers should not throw; the
// controller still catches anything that escapes (an error result, a log
// line and a Warning Event), so a bug costs one object's progress, never
// the operator.
class Reconciler {
 public:
  virtual ~Reconciler() = default;
  virtual Result<Outcome> Reconcile(const std::string& key) = 0;
};

// Writes the operator-owned part of status (a JSON merge patch, so the node
// daemon's status.vm / status.nodes are untouched) only when it differs from
// what the object carries. Returns whether it wrote.
Result<bool> WriteStatusIfChanged(Context& ctx, const kube::Resource& r, const Json& obj,
                                  const Json& desired);

// A merge patch of `metadata` (finalizers, labels) guarded by the
// resourceVersion the pass read: the apiserver answers 409 when the object
// changed since, and the key is reconciled again from the newer copy.
Json GuardedMetaPatch(const ObjectMeta& meta, Json metadata);

// `meta`'s finalizers with `finalizer` added (for a GuardedMetaPatch that
// writes more than the finalizer).
Json FinalizersWith(const ObjectMeta& meta, std::string_view finalizer);
// Adds `finalizer` to the object of `meta` (a GuardedMetaPatch): the object
// as patched.
Result<Json> AddFinalizer(const Context& ctx, const kube::Resource& r, const ObjectMeta& meta,
                          std::string_view finalizer);
// Removes `finalizer` from the object of `meta` (a GuardedMetaPatch); an
// object already gone is no error.
Status RemoveFinalizer(const Context& ctx, const kube::Resource& r, const ObjectMeta& meta,
                       std::string_view finalizer);

}  // namespace kubicle::op
