// In-memory KubeClient that behaves like the apiserver where reconcilers can
// tell the difference: resourceVersions and optimistic-concurrency
// conflicts, generation bumps on spec changes, the status subresource,
// finalizers and deletionTimestamp, background garbage collection through
// ownerReferences, label selectors, and watches that resume from a
// resourceVersion (410 Gone after CompactHistory()). Server-side apply is
// approximated by a JSON merge patch. Faults can be injected per verb.
// Thread-safe; watches block on a condition variable.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kube/clock.h"
#include "kube/kube_client.h"

namespace kubicle::kube {

class FakeKubeClient final : public KubeClient {
 public:
  explicit FakeKubeClient(const Clock* clock = &RealClock::Instance());

  Result<Json> Get(const Resource& r, std::string_view ns, std::string_view name,
                   std::string_view subresource = {}) override;
  Result<Json> List(const Resource& r, std::string_view ns, const ListOptions& opts) override;
  Result<Json> Create(const Resource& r, std::string_view ns, const Json& object) override;
  Result<Json> Update(const Resource& r, std::string_view ns, const Json& object,
                      std::string_view subresource = {}) override;
  Result<Json> Patch(const Resource& r, std::string_view ns, std::string_view name,
                     PatchType type, const Json& patch, std::string_view subresource = {},
                     const PatchOptions& opts = {}) override;
  Status Delete(const Resource& r, std::string_view ns, std::string_view name,
                const DeleteOptions& opts = {}) override;
  Status DeleteCollection(const Resource& r, std::string_view ns,
                          std::string_view label_selector) override;
  Status Watch(const Resource& r, std::string_view ns, const WatchOptions& opts,
               const WatchHandler& handler, const CancelToken& cancel) override;

  // The next `count` calls of `verb` ("get", "list", "create", "update",
  // "patch", "delete", "watch") fail with `status`.
  void FailNext(const std::string& verb, Status status, int count = 1);
  // Forget the event history: watches from older resourceVersions get Gone.
  void CompactHistory();
  // End every open watch with Unavailable (an apiserver restart).
  void CloseWatches();
  // "create sandboxes ns/name" lines, in order (reads are not recorded).
  std::vector<std::string> Actions() const;
  void ClearActions();
  int64_t CurrentResourceVersion() const;

 private:
  struct Key {
    std::string gr, ns, name;
    auto operator<=>(const Key&) const = default;
  };
  struct Event {
    int64_t rv;
    std::string gr, ns;
    WatchEventType type;
    Json object;
    Json old_object;  // null for ADDED
  };

  Status TakeFault(const std::string& verb);
  void Record(const std::string& verb, const Resource& r, std::string_view ns,
              std::string_view name);
  Result<Json> WriteLocked(const Resource& r, const Key& key, Json desired,
                           std::string_view subresource, bool check_rv);
  void RemoveLocked(const Key& key);
  void CollectGarbageLocked(const std::string& owner_uid);
  void EmitLocked(const Key& key, WatchEventType type, const Json& object, const Json& old);
  std::string NextRv() { return std::to_string(++rv_); }
  static bool HasStatusSubresource(const Resource& r);

  const Clock* clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t rv_ = 1000;
  int64_t uid_counter_ = 0;
  int64_t compacted_rv_ = 0;  // events at or below this are forgotten
  uint64_t watch_epoch_ = 0;  // bumped by CloseWatches()
  std::map<Key, Json> objects_;
  std::map<std::string, std::string> gr_of_uid_;  // uid -> "gr|ns|name"
  std::vector<Event> history_;
  std::map<std::string, std::vector<Status>> faults_;
  std::vector<std::string> actions_;
};

}  // namespace kubicle::kube
