#include "kube/event_recorder.h"

#include <cstdio>

#include "common/log.h"
#include "kube/json_fields.h"
#include "kube/time_format.h"

namespace kubicle::kube {

EventRecorder::EventRecorder(KubeClient* client, std::string component, std::string instance,
                             const Clock* clock, EventRecorderOptions options)
    : client_(client), component_(std::move(component)), instance_(std::move(instance)),
      clock_(clock), options_(options) {}

EventRecorder::~EventRecorder() {
  (void)Flush(options_.drain_timeout);
  {
    std::lock_guard l(mu_);
    stopping_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
}

void EventRecorder::Record(const Json& object, std::string_view type, std::string_view reason,
                           std::string_view message) {
  const Json& md = At(object, {"metadata"});
  Pending e;
  e.ns = StrAt(md, {"namespace"});
  if (e.ns.empty()) e.ns = "default";
  e.name = StrAt(md, {"name"});
  const std::string uid = StrAt(md, {"uid"});
  e.involved = {{"apiVersion", StrAt(object, {"apiVersion"})},
                {"kind", StrAt(object, {"kind"})},
                {"name", e.name},
                {"namespace", e.ns},
                {"uid", uid},
                {"resourceVersion", StrAt(md, {"resourceVersion"})}};
  e.type = type;
  e.reason = reason;
  e.message = message;
  e.time = FormatTime(clock_->Now());
  e.dedup = uid + "|" + e.type + "|" + e.reason + "|" + e.message;
  std::lock_guard l(mu_);
  if (stopping_) return;
  if (queue_.size() >= options_.max_pending) {
    if (dropped_++ % 100 == 0) {
      log::Warn("event queue full; dropping events", {{"reason", e.reason}, {"dropped", dropped_}});
    }
    return;
  }
  queue_.push_back(std::move(e));
  if (!sender_.joinable()) sender_ = std::thread([this] { SendLoop(); });
  cv_.notify_all();
}

bool EventRecorder::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock l(mu_);
  return cv_.wait_for(l, timeout, [this] { return queue_.empty() && !sending_; });
}

uint64_t EventRecorder::dropped() const {
  std::lock_guard l(mu_);
  return dropped_;
}

void EventRecorder::SendLoop() {
  std::unique_lock l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Pending e = std::move(queue_.front());
    queue_.pop_front();
    sending_ = true;
    l.unlock();
    Send(e);
    l.lock();
    sending_ = false;
    cv_.notify_all();  // a Flush may be waiting
  }
}

void EventRecorder::Send(const Pending& e) {
  if (auto it = seen_.find(e.dedup); it != seen_.end()) {
    Json patch = {{"count", ++it->second.count}, {"lastTimestamp", e.time}};
    if (client_->Patch(EventResource(), e.ns, it->second.name, PatchType::kMerge, patch).ok()) return;
    seen_.erase(it);  // the Event expired server-side; create a new one
  }
  if (seen_.size() > 4096) seen_.clear();
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), ".%llx",
                static_cast<unsigned long long>(clock_->Now().time_since_epoch().count()));
  const std::string name = (e.name.empty() ? "object" : e.name) + suffix;
  Json ev = {{"metadata", {{"name", name}, {"namespace", e.ns}}},
             {"involvedObject", e.involved},
             {"type", e.type},
             {"reason", e.reason},
             {"message", e.message},
             {"source", {{"component", component_}}},
             {"reportingComponent", component_},
             {"reportingInstance", instance_},
             {"firstTimestamp", e.time},
             {"lastTimestamp", e.time},
             {"count", 1}};
  auto r = client_->Create(EventResource(), e.ns, ev);
  if (!r.ok()) {
    log::Warn("event not recorded", {{"reason", e.reason}, {"error", r.status().ToString()}});
    return;
  }
  seen_[e.dedup] = Seen{name, 1};
}

}  // namespace kubicle::kube
