#include "kube/event_recorder.h"

#include <algorithm>
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
  const std::string similar = e.ns + "|" + StrAt(object, {"kind"}) + "|" + e.type + "|" + e.reason;
  std::lock_guard l(mu_);
  if (stopping_) return;
  if (!sender_.joinable()) sender_ = std::thread([this] { SendLoop(); });
  if (!TakeToken(similar)) {
    if (folded_.empty()) first_folded_ = std::chrono::steady_clock::now();
    Folded& f = folded_[similar];  // as many keys as kinds x reasons: bounded by the code
    f.last = std::move(e);
    ++f.count;
    cv_.notify_all();
    return;
  }
  if (queue_.size() >= options_.max_pending) {
    if (dropped_++ % 100 == 0) {
      log::Warn("event queue full; dropping events", {{"reason", e.reason}, {"dropped", dropped_}});
    }
    return;
  }
  queue_.push_back(std::move(e));
  cv_.notify_all();
}

bool EventRecorder::TakeToken(const std::string& similar) {
  if (options_.burst <= 0) return true;
  const TimePoint now = clock_->Now();
  if (buckets_.size() > 4096) buckets_.clear();  // namespaces come and go; a reset only refills
  auto [it, fresh] = buckets_.try_emplace(similar);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = options_.burst;
  } else if (now > b.last) {
    const double back = std::chrono::duration<double>(now - b.last) / options_.refill;
    b.tokens = std::min<double>(options_.burst, b.tokens + back);
  }
  b.last = std::max(b.last, now);
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

void EventRecorder::QueueFolded() {
  for (auto& [similar, f] : folded_) {
    Pending e = std::move(f.last);
    e.count = f.count;
    e.message = "(combined from similar events): " + std::to_string(f.count) + " " + e.reason +
                " Events in a burst, the last: " + e.message;
    // One combined Event per kind of burst: the next burst adds to its count.
    e.dedup = "combined|" + similar;
    queue_.push_back(std::move(e));  // over max_pending: one per key, bounded by the code
  }
  folded_.clear();
}

bool EventRecorder::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock l(mu_);
  if (!folded_.empty()) {
    flush_folded_ = true;
    cv_.notify_all();
  }
  return cv_.wait_for(l, timeout, [this] { return queue_.empty() && folded_.empty() && !sending_; });
}

uint64_t EventRecorder::dropped() const {
  std::lock_guard l(mu_);
  return dropped_;
}

void EventRecorder::SendLoop() {
  std::unique_lock l(mu_);
  for (;;) {
    auto folded_due = [this] {
      return !folded_.empty() &&
             (flush_folded_ || std::chrono::steady_clock::now() >= first_folded_ + options_.refill);
    };
    auto wake = [&] { return stopping_ || !queue_.empty() || folded_due(); };
    if (folded_.empty()) {
      cv_.wait(l, wake);
    } else {
      cv_.wait_until(l, first_folded_ + options_.refill, wake);
    }
    if (stopping_) return;
    if (folded_due()) {
      QueueFolded();
      flush_folded_ = false;
    }
    if (queue_.empty()) continue;
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
    it->second.count += e.count;
    Json patch = {{"count", it->second.count}, {"lastTimestamp", e.time}, {"message", e.message}};
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
             {"count", e.count}};
  auto r = client_->Create(EventResource(), e.ns, ev);
  if (!r.ok()) {
    log::Warn("event not recorded", {{"reason", e.reason}, {"error", r.status().ToString()}});
    return;
  }
  seen_[e.dedup] = Seen{name, e.count};
}

}  // namespace kubicle::kube
