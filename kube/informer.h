// Informer: a local cache of one resource kept current by list-then-watch,
// with client-go's recovery rules: watch from the list's resourceVersion,
// ask for bookmarks and remember their resourceVersion, re-watch when the
// server closes the stream, relist on 410 Gone, and back off exponentially
// (100 ms .. 30 s) on other errors (the apiserver is down or restarting).
// Handlers run on the informer's thread, after the cache is updated, with
// the new object (the last known state for deletions); they must be quick
// (typically: enqueue a key). Thread-safe cache reads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kube/kube_client.h"

namespace kubicle::kube {

class Informer {
 public:
  using Handler = std::function<void(WatchEventType type, const Json& object)>;

  Informer(KubeClient* client, Resource resource, std::string ns = {},
           std::string label_selector = {});
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void AddHandler(Handler h);  // before Start()
  void Start();
  void Stop();
  bool HasSynced() const { return synced_.load(); }
  bool WaitForSync(std::chrono::milliseconds timeout) const;

  // Cache reads ("ns/name" keys).
  std::optional<Json> Get(const std::string& key) const;
  std::vector<Json> List() const;
  // Visits cached objects under the cache lock, without copying them; `fn`
  // must not call back into this informer.
  void ForEach(const std::function<void(const Json&)>& fn) const;
  size_t Size() const;

  // Observability for tests and metrics.
  int Relists() const { return relists_.load(); }
  std::string LastResourceVersion() const;

 private:
  void Run();
  Status ListAndReplace();
  Status WatchOnce();
  void Apply(WatchEventType type, const Json& object);
  void Notify(WatchEventType type, const Json& object);
  void SleepFor(std::chrono::milliseconds d);

  KubeClient* client_;
  Resource resource_;
  std::string ns_;
  std::string selector_;
  std::vector<Handler> handlers_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Json> store_;
  std::string rv_;
  std::atomic<bool> synced_{false};
  std::atomic<int> relists_{0};
  CancelToken cancel_;
  std::thread thread_;
};

std::string KeyOf(const Json& object);

}  // namespace kubicle::kube
