// Names fixed by the API (labels, finalizer, condition types and reasons)
// and small helpers over unstructured objects of any kind (Leases, Secrets,
// children in a cache): metadata accessors that never throw (a missing field
// or one of another type reads as ""/0/false; the API's own kinds have
// typed views in kube/api/types.h), the Kubernetes condition list (lastTransitionTime kept while the status does
// not change, so a recomputed status is byte-identical when nothing
// changed), and ownerReferences.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "kube/clock.h"
#include "kube/api/names.h"
#include "kube/api/types.h"
#include "kube/kube_client.h"

namespace kubicle::op {

using kube::Json;

// The API's names and typed views (kube/api), by their short names.
using kube::api::kAnnotationCapacityMemory;
using kube::api::kAnnotationCapacitySandboxes;
using kube::api::kCondExpired;
using kube::api::kCondReady;
using kube::api::kCondReconciling;
using kube::api::kCondScheduled;
using kube::api::kCondStalled;
using kube::api::kCondValid;
using kube::api::kFinalizer;
using kube::api::kLabelAgent;
using kube::api::kLabelForkOf;
using kube::api::kLabelNode;
using kube::api::kLabelRun;
using kube::api::kLabelTemplate;
using kube::api::kWorkspaceFinalizer;
using kube::api::JoinProblems;
using kube::api::ObjectMeta;
using kube::api::ParseObjectMeta;
using kube::api::ParseSandboxForkSpec;
using kube::api::ParseSandboxSpec;
using kube::api::ParseSandboxTemplateSpec;
using kube::api::SandboxForkSpec;
using kube::api::SandboxForkView;
using kube::api::SandboxSpec;
using kube::api::SandboxTemplateSpec;
using kube::api::SandboxTemplateView;
using kube::api::SandboxView;
using kube::api::TemplateNodeEntry;
using kube::api::WorkspaceView;

std::string Name(const Json& obj);
std::string Namespace(const Json& obj);
std::string Uid(const Json& obj);
int64_t Generation(const Json& obj);
std::string Label(const Json& obj, std::string_view key);
std::map<std::string, std::string> Labels(const Json& obj);
bool IsDeleting(const Json& obj);
bool HasFinalizer(const Json& obj, std::string_view f);
// Status field as string ("" when absent).
std::string StatusString(const Json& obj, std::string_view field);

struct Condition {
  std::string type, status, reason, message;
};
// Returns `conditions` with `c` set: lastTransitionTime moves only when the
// status changes; observedGeneration is the object's generation.
Json SetCondition(const Json& conditions, const Condition& c, int64_t generation,
                  kube::TimePoint now);
std::optional<Json> FindCondition(const Json& obj, std::string_view type);

// What a pass concluded about an object's progress towards its spec.
// kstatus computes InProgress while Reconciling is True, Failed once Stalled
// is True and otherwise reads Ready, so every kind sets both on every pass:
//   kWorking  Reconciling True  (why.reason, why.message), Stalled False
//   kStalled  Reconciling False, Stalled True (why.reason, why.message):
//             nothing more happens without a change to the spec or the world
//   kSettled  both False: the status is what the spec asks for
// Never both True: kstatus takes the first True one in list order.
enum class Progress { kSettled, kWorking, kStalled };
Json SetProgress(const Json& conditions, Progress p, const Condition& why, int64_t generation,
                 kube::TimePoint now);

// A controller ownerReference to `owner` (blockOwnerDeletion true).
Json ControllerRef(const Json& owner);
// True when `obj` has a controller ownerReference with `owner_uid`.
bool IsControlledBy(const Json& obj, const std::string& owner_uid);

// A new bearer token: 32 random bytes, hex.
Result<std::string> NewToken();

// Truncates to a valid object name (<= max chars) with a hash suffix when cut.
std::string BoundedName(const std::string& base, const std::string& suffix, size_t max = 253);

}  // namespace kubicle::op
