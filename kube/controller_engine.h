// The one controller loop of the operator and the node agent: informers
// feed a rate-limited work queue ("ns/name" keys, or keys the owner
// chooses), and `workers` threads run the owner's pass on each key. A key
// is never run by two workers at once (WorkQueue semantics); backoff,
// delays and forgetting are the queue's, called by the pass. Optionally a
// resync thread queues every object of the informers marked for it every
// `resync` (so a pass sees a world that changed without an event) and then
// runs the owner's periodic hook. Metrics: the queue depth gauge
// `<metrics_prefix>_queue_depth`.
//
// Lifetime: Watch() and OnResync() before Start(); Stop() (also from the
// destructor) stops the resync thread, then the workers, then the
// informers, so no pass runs after it returns. The informers are the
// owner's and must outlive the engine's Stop().
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "kube/clock.h"
#include "kube/informer.h"
#include "kube/work_queue.h"

namespace kubicle::kube {

struct EngineOptions {
  int workers = 1;
  // Zero: no resync thread.
  std::chrono::milliseconds resync{0};
  // With a registry: the queue depth gauge is registered under it.
  metrics::Registry* registry = nullptr;
  std::string metrics_prefix;
};

class ControllerEngine {
 public:
  using Pass = std::function<void(const std::string& key)>;

  explicit ControllerEngine(EngineOptions options, const Clock* clock = &RealClock::Instance());
  ~ControllerEngine();
  ControllerEngine(const ControllerEngine&) = delete;
  ControllerEngine& operator=(const ControllerEngine&) = delete;

  // Started in this order by Start(); with `resync`, every object of it is
  // queued by key ("ns/name") on each resync.
  void Watch(Informer* informer, bool resync = false);
  // Run on the resync thread after each refill, once every watched
  // informer has synced.
  void OnResync(std::function<void()> hook);

  // Starts the informers; with `wait_for_sync`, waits up to that long for
  // each one's first list (DeadlineExceeded, and no worker started, when
  // one does not make it); then the workers and the resync thread.
  Status Start(Pass pass, std::optional<std::chrono::milliseconds> wait_for_sync = std::nullopt);
  void Stop();

  WorkQueue& Queue() { return queue_; }
  bool Synced() const;

 private:
  void Work();
  void Resync();

  EngineOptions options_;
  WorkQueue queue_;
  std::vector<Informer*> informers_;
  std::vector<Informer*> resynced_;
  std::function<void()> hook_;
  Pass pass_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread resync_;
  std::vector<std::thread> workers_;
};

}  // namespace kubicle::kube
