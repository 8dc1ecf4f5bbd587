#include "kube/informer.h"

#include <algorithm>

#include "common/log.h"
#include "kube/json_fields.h"

namespace kubicle::kube {

std::string KeyOf(const Json& object) {
  return ObjectKey(StrAt(object, {"metadata", "namespace"}), StrAt(object, {"metadata", "name"}));
}

Informer::Informer(KubeClient* client, Resource resource, std::string ns,
                   std::string label_selector)
    : client_(client),
      resource_(std::move(resource)),
      ns_(std::move(ns)),
      selector_(std::move(label_selector)) {}

Informer::~Informer() { Stop(); }

void Informer::AddHandler(Handler h) { handlers_.push_back(std::move(h)); }

void Informer::Start() { thread_ = std::thread([this] { Run(); }); }

void Informer::Stop() {
  cancel_.Cancel();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return synced_.load(); });
}

std::optional<Json> Informer::Get(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = store_.find(key);
  if (it == store_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Informer::List() const {
  std::lock_guard lock(mu_);
  std::vector<Json> out;
  out.reserve(store_.size());
  for (const auto& [k, v] : store_) out.push_back(v);
  return out;
}

void Informer::ForEach(const std::function<void(const Json&)>& fn) const {
  std::lock_guard lock(mu_);
  for (const auto& [k, v] : store_) fn(v);
}

size_t Informer::Size() const {
  std::lock_guard lock(mu_);
  return store_.size();
}

std::string Informer::LastResourceVersion() const {
  std::lock_guard lock(mu_);
  return rv_;
}

void Informer::SleepFor(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [this] { return cancel_.IsCancelled(); });
}

void Informer::Notify(WatchEventType type, const Json& object) {
  for (const Handler& h : handlers_) h(type, object);
}

void Informer::Apply(WatchEventType type, const Json& object) {
  std::string key = KeyOf(object);
  {
    std::lock_guard lock(mu_);
    if (type == WatchEventType::kDeleted) store_.erase(key);
    else store_[key] = object;
    rv_ = object["metadata"].value("resourceVersion", rv_);
  }
  Notify(type, object);
}

Status Informer::ListAndReplace() {
  ListOptions opts;
  opts.label_selector = selector_;
  ASSIGN_OR_RETURN(Json list, client_->List(resource_, ns_, opts));
  std::map<std::string, Json> fresh;
  for (const Json& item : list["items"]) fresh[KeyOf(item)] = item;
  std::vector<Json> gone;
  {
    std::lock_guard lock(mu_);
    for (const auto& [k, v] : store_) {
      if (!fresh.count(k)) gone.push_back(v);
    }
    store_ = fresh;
    rv_ = list["metadata"].value("resourceVersion", "");
  }
  relists_.fetch_add(1);
  for (const Json& obj : gone) Notify(WatchEventType::kDeleted, obj);
  for (const auto& [k, obj] : fresh) Notify(WatchEventType::kModified, obj);
  synced_.store(true);
  cv_.notify_all();
  return Status::Ok();
}

Status Informer::WatchOnce() {
  WatchOptions opts;
  opts.label_selector = selector_;
  opts.resource_version = LastResourceVersion();
  opts.allow_bookmarks = true;
  opts.timeout_seconds = 240 + static_cast<int>(std::hash<std::string>{}(resource_.plural) % 60);
  return client_->Watch(
      resource_, ns_, opts,
      [this](const WatchEvent& ev) {
        if (ev.type == WatchEventType::kBookmark) {
          std::lock_guard lock(mu_);
          rv_ = ev.object["metadata"].value("resourceVersion", rv_);
          return !cancel_.IsCancelled();
        }
        Apply(ev.type, ev.object);
        return !cancel_.IsCancelled();
      },
      cancel_);
}

void Informer::Run() {
  auto backoff = std::chrono::milliseconds(100);
  bool need_list = true;
  while (!cancel_.IsCancelled()) {
    Status s = need_list ? ListAndReplace() : WatchOnce();
    if (cancel_.IsCancelled()) break;
    if (s.ok()) {
      need_list = false;
      backoff = std::chrono::milliseconds(100);
      continue;
    }
    if (IsGone(s)) {
      log::Info("watch expired, relisting", {{"resource", resource_.GroupResource()}});
      need_list = true;
      continue;
    }
    log::Warn("list/watch failed",
              {{"resource", resource_.GroupResource()}, {"error", s.ToString()},
               {"backoff_ms", static_cast<int64_t>(backoff.count())}});
    SleepFor(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
    if (LastResourceVersion().empty()) need_list = true;
  }
}

}  // namespace kubicle::kube
