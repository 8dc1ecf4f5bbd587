#include "kube/event_recorder.h"

#include <cstdio>

#include "common/log.h"
#include "kube/json_fields.h"
#include "kube/time_format.h"

namespace kubicle::kube {

EventRecorder::EventRecorder(KubeClient* client, std::string component, std::string instance,
                             const Clock* clock)
    : client_(client), component_(std::move(component)), instance_(std::move(instance)),
      clock_(clock) {}

void EventRecorder::Record(const Json& object, std::string_view type, std::string_view reason,
                           std::string_view message) {
  const Json& md = At(object, {"metadata"});
  std::string ns = StrAt(md, {"namespace"});
  if (ns.empty()) ns = "default";
  std::string uid = StrAt(md, {"uid"});
  std::string dedup = uid + "|" + std::string(type) + "|" + std::string(reason) + "|" +
                      std::string(message);
  std::string now = FormatTime(clock_->Now());
  // The lock guards the dedup map only, never an API call.
  std::unique_lock lock(mu_);
  auto it = seen_.find(dedup);
  if (it != seen_.end()) {
    int count = ++it->second.count;
    std::string existing = it->second.name;
    lock.unlock();
    Json patch = {{"count", count}, {"lastTimestamp", now}};
    if (client_->Patch(EventResource(), ns, existing, PatchType::kMerge, patch).ok()) return;
    lock.lock();
    seen_.erase(dedup);  // the Event expired server-side; create a new one
  }
  if (seen_.size() > 4096) seen_.clear();
  lock.unlock();
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), ".%llx",
                static_cast<unsigned long long>(clock_->Now().time_since_epoch().count()));
  std::string name = (StrAt(md, {"name"}).empty() ? "object" : StrAt(md, {"name"})) + suffix;
  Json ev = {
      {"metadata", {{"name", name}, {"namespace", ns}}},
      {"involvedObject",
       {{"apiVersion", StrAt(object, {"apiVersion"})},
        {"kind", StrAt(object, {"kind"})},
        {"name", StrAt(md, {"name"})},
        {"namespace", ns},
        {"uid", uid},
        {"resourceVersion", StrAt(md, {"resourceVersion"})}}},
      {"type", type},
      {"reason", reason},
      {"message", message},
      {"source", {{"component", component_}}},
      {"reportingComponent", component_},
      {"reportingInstance", instance_},
      {"firstTimestamp", now},
      {"lastTimestamp", now},
      {"count", 1}};
  auto r = client_->Create(EventResource(), ns, ev);
  if (!r.ok()) {
    log::Warn("event not recorded", {{"reason", std::string(reason)}, {"error", r.status().ToString()}});
    return;
  }
  lock.lock();
  seen_[dedup] = Seen{name, 1};
}

}  // namespace kubicle::kube
