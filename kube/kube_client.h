// KubeClient: the only way to the Kubernetes API of the operator, the node
// agent and the kubectl plugin. One interface, two implementations:
// HttpKubeClient (cpprestsdk, real apiserver) and FakeKubeClient (in memory,
// for unit tests of reconcile logic).
//
// Contracts:
// - Objects are unstructured JSON exactly as the apiserver sends them.
// - No exceptions: every failure is a Status. HTTP errors map to codes:
//   404 NotFound; 409 AlreadyExists (reason AlreadyExists) or Conflict (see
//   IsConflict); 410 Gone (IsGone: resourceVersion too old, relist); 400/422
//   InvalidArgument with the apiserver's message; 401/403 PermissionDenied;
//   429, 5xx and transport errors Unavailable (retryable).
// - Watch blocks the calling thread, delivering events in order, until the
//   server ends the stream (OK), an error occurs, the handler returns false
//   (OK), or `cancel` is set (OK). Implementations are thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kube/resource.h"

namespace kubicle::kube {

using Json = nlohmann::json;

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" = most recent (quorum read)
  int limit = 0;                 // 0 = no paging
  std::string continue_token;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // resume point; events strictly after it
  bool allow_bookmarks = true;
  int timeout_seconds = 300;  // server closes the stream after this
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };
std::string_view WatchEventTypeName(WatchEventType t);
Result<WatchEventType> ParseEventType(const std::string& name);

struct WatchEvent {
  WatchEventType type;
  Json object;  // for kError, a metav1.Status
};

enum class PatchType { kMerge, kStrategicMerge, kApply };

struct PatchOptions {
  std::string field_manager = "kubicle-operator";
  bool force = false;  // server-side apply: take ownership of conflicting fields
};

struct DeleteOptions {
  std::string propagation_policy;  // "", "Background", "Foreground", "Orphan"
  std::string precondition_uid;
  std::string precondition_resource_version;
};

// Shared cancellation flag for long calls (Watch).
struct CancelToken {
  std::atomic<bool> cancelled{false};
  void Cancel() { cancelled.store(true); }
  bool IsCancelled() const { return cancelled.load(); }
};

using WatchHandler = std::function<bool(const WatchEvent&)>;

class KubeClient {
 public:
  virtual ~KubeClient() = default;

  virtual Result<Json> Get(const Resource& r, std::string_view ns, std::string_view name,
                           std::string_view subresource = {}) = 0;
  // Returns the List object (items, metadata.resourceVersion, continue).
  virtual Result<Json> List(const Resource& r, std::string_view ns, const ListOptions& opts) = 0;
  virtual Result<Json> Create(const Resource& r, std::string_view ns, const Json& object) = 0;
  // PUT; metadata.resourceVersion in `object` is the optimistic-concurrency
  // precondition. subresource "status" writes only status.
  virtual Result<Json> Update(const Resource& r, std::string_view ns, const Json& object,
                              std::string_view subresource = {}) = 0;
  virtual Result<Json> Patch(const Resource& r, std::string_view ns, std::string_view name,
                             PatchType type, const Json& patch,
                             std::string_view subresource = {},
                             const PatchOptions& opts = {}) = 0;
  virtual Status Delete(const Resource& r, std::string_view ns, std::string_view name,
                        const DeleteOptions& opts = {}) = 0;
  virtual Status DeleteCollection(const Resource& r, std::string_view ns,
                                  std::string_view label_selector) = 0;
  virtual Status Watch(const Resource& r, std::string_view ns, const WatchOptions& opts,
                       const WatchHandler& handler, const CancelToken& cancel) = 0;
};

// Status classification of the mapping above.
bool IsConflict(const Status& s);
bool IsGone(const Status& s);
inline bool IsNotFound(const Status& s) { return s.code() == StatusCode::kNotFound; }
inline bool IsAlreadyExists(const Status& s) { return s.code() == StatusCode::kAlreadyExists; }
// Status for an HTTP code and the apiserver's metav1.Status body (may be null).
Status StatusFromHttp(int http_code, const Json& body);

// Retries `fn` while it returns a conflict (re-reading is fn's job), like
// client-go's RetryOnConflict: up to `attempts` tries.
Status RetryOnConflict(int attempts, const std::function<Status()>& fn);

}  // namespace kubicle::kube
