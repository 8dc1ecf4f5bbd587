#include "kube/controller_engine.h"

namespace kubicle::kube {

using namespace std::chrono_literals;

ControllerEngine::ControllerEngine(EngineOptions options, const Clock* clock)
    : options_(std::move(options)), queue_(clock) {
  if (options_.registry) {
    options_.registry->AddGaugeCallback(options_.metrics_prefix + "_queue_depth",
                                        "Keys ready in the work queue.", {}, [this] {
                                          return std::vector<std::pair<metrics::LabelValues, double>>{
                                              {{}, static_cast<double>(queue_.Len())}};
                                        });
  }
}

ControllerEngine::~ControllerEngine() { Stop(); }

void ControllerEngine::Watch(Informer* informer, bool resync) {
  informers_.push_back(informer);
  if (resync) resynced_.push_back(informer);
}

void ControllerEngine::OnResync(std::function<void()> hook) { hook_ = std::move(hook); }

bool ControllerEngine::Synced() const {
  for (const Informer* i : informers_) {
    if (!i->HasSynced()) return false;
  }
  return true;
}

Status ControllerEngine::Start(Pass pass, std::optional<std::chrono::milliseconds> wait_for_sync) {
  pass_ = std::move(pass);
  for (Informer* i : informers_) i->Start();
  if (wait_for_sync) {
    for (Informer* i : informers_) {
      if (!i->WaitForSync(*wait_for_sync)) return Status::DeadlineExceeded("informer cache sync");
    }
  }
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
  if (options_.resync > 0ms) resync_ = std::thread([this] { Resync(); });
  return Status::Ok();
}

void ControllerEngine::Stop() {
  {
    std::lock_guard l(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (resync_.joinable()) resync_.join();
  queue_.ShutDown();
  for (auto& t : workers_) t.join();
  workers_.clear();
  for (Informer* i : informers_) i->Stop();
  // Stopped once: a second Stop (the owner's, then the destructor) must
  // not touch informers the owner may have destroyed since.
  informers_.clear();
  resynced_.clear();
}

void ControllerEngine::Work() {
  while (auto key = queue_.Get()) {
    pass_(*key);
    queue_.Done(*key);
  }
}

void ControllerEngine::Resync() {
  std::unique_lock l(stop_mu_);
  while (!stopping_) {
    l.unlock();
    const bool synced = Synced();
    if (synced) {
      for (Informer* i : resynced_) i->ForEach([this](const Json& o) { queue_.Add(KeyOf(o)); });
      if (hook_) hook_();
    }
    l.lock();
    // Until the first list, look again soon: the first resync fills the
    // queue once the cache is there.
    stop_cv_.wait_for(l, synced ? options_.resync : std::chrono::milliseconds(100ms),
                      [this] { return stopping_; });
  }
}

}  // namespace kubicle::kube
