#include "kube/fake_kube_client.h"

#include <chrono>
#include <cstdint>

#include "kube/label_selector.h"
#include "kube/time_format.h"

namespace kubicle::kube {
namespace {

bool HasFinalizers(const Json& obj) {
  const Json& md = obj["metadata"];
  return md.contains("finalizers") && md["finalizers"].is_array() && !md["finalizers"].empty();
}

bool IsDeleting(const Json& obj) { return obj["metadata"].contains("deletionTimestamp"); }

std::string Base64(const std::string& in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += {kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], '='};
  }
  return out;
}

// As the apiserver stores a Secret: stringData is write-only, folded into
// data (base64) over any key of the same name.
void FoldStringData(const Resource& r, Json* obj) {
  if (!r.group.empty() || r.plural != "secrets" || !obj->contains("stringData")) return;
  const Json sd = (*obj)["stringData"];
  obj->erase("stringData");
  if (!sd.is_object()) return;
  for (const auto& [k, v] : sd.items()) {
    if (v.is_string()) (*obj)["data"][k] = Base64(v.get<std::string>());
  }
}

Json WithoutStatusAndMeta(const Json& obj) {
  Json j = obj;
  j.erase("status");
  j.erase("metadata");
  return j;
}

}  // namespace

FakeKubeClient::FakeKubeClient(const Clock* clock) : clock_(clock) {}

bool FakeKubeClient::HasStatusSubresource(const Resource& r) { return r.group == kGroup; }

void FakeKubeClient::FailNext(const std::string& verb, Status status, int count) {
  std::lock_guard lock(mu_);
  for (int i = 0; i < count; ++i) faults_[verb].push_back(status);
}

Status FakeKubeClient::TakeFault(const std::string& verb) {
  auto it = faults_.find(verb);
  if (it == faults_.end() || it->second.empty()) return Status::Ok();
  Status s = it->second.front();
  it->second.erase(it->second.begin());
  return s;
}

void FakeKubeClient::Record(const std::string& verb, const Resource& r, std::string_view ns,
                            std::string_view name) {
  actions_.push_back(verb + " " + r.plural + " " + ObjectKey(ns, name));
}

std::vector<std::string> FakeKubeClient::Actions() const {
  std::lock_guard lock(mu_);
  return actions_;
}

void FakeKubeClient::ClearActions() {
  std::lock_guard lock(mu_);
  actions_.clear();
}

int64_t FakeKubeClient::CurrentResourceVersion() const {
  std::lock_guard lock(mu_);
  return rv_;
}

void FakeKubeClient::CompactHistory() {
  std::lock_guard lock(mu_);
  compacted_rv_ = rv_;
  history_.clear();
}

void FakeKubeClient::CloseWatches() {
  std::lock_guard lock(mu_);
  ++watch_epoch_;
  cv_.notify_all();
}

void FakeKubeClient::EmitLocked(const Key& key, WatchEventType type, const Json& object,
                                const Json& old) {
  history_.push_back(Event{rv_, key.gr, key.ns, type, object, old});
  cv_.notify_all();
}

Result<Json> FakeKubeClient::Get(const Resource& r, std::string_view ns, std::string_view name,
                                 std::string_view) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(TakeFault("get"));
  auto it = objects_.find(Key{r.GroupResource(), std::string(ns), std::string(name)});
  if (it == objects_.end()) {
    return Status::NotFound(r.GroupResource() + " \"" + std::string(name) + "\" not found");
  }
  return it->second;
}

Result<Json> FakeKubeClient::List(const Resource& r, std::string_view ns,
                                  const ListOptions& opts) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(TakeFault("list"));
  ASSIGN_OR_RETURN(LabelSelector sel, LabelSelector::Parse(opts.label_selector));
  Json items = Json::array();
  for (const auto& [key, obj] : objects_) {
    if (key.gr != r.GroupResource() || (!ns.empty() && key.ns != ns)) continue;
    if (sel.MatchesObject(obj)) items.push_back(obj);
  }
  return Json{{"apiVersion", r.ApiVersion()},
              {"kind", r.kind + "List"},
              {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
              {"items", items}};
}

Result<Json> FakeKubeClient::Create(const Resource& r, std::string_view ns, const Json& object) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(TakeFault("create"));
  Json obj = object;
  Json& md = obj["metadata"];
  if (!md.contains("name") && md.contains("generateName")) {
    md["name"] = md["generateName"].get<std::string>() + std::to_string(++uid_counter_);
  }
  if (!md.contains("name")) return Status::InvalidArgument("metadata.name: Required value");
  Key key{r.GroupResource(), std::string(ns), md["name"].get<std::string>()};
  if (objects_.count(key)) {
    return Status::AlreadyExists(r.GroupResource() + " \"" + key.name + "\" already exists");
  }
  if (HasStatusSubresource(r)) obj.erase("status");
  FoldStringData(r, &obj);
  obj["apiVersion"] = r.ApiVersion();
  obj["kind"] = r.kind;
  if (r.namespaced) md["namespace"] = std::string(ns);
  md["uid"] = "uid-" + std::to_string(++uid_counter_);
  md["creationTimestamp"] = FormatTime(clock_->Now());
  md["generation"] = 1;
  md["resourceVersion"] = NextRv();
  md.erase("deletionTimestamp");
  objects_[key] = obj;
  Record("create", r, ns, key.name);
  EmitLocked(key, WatchEventType::kAdded, obj, nullptr);
  return obj;
}

Result<Json> FakeKubeClient::WriteLocked(const Resource& r, const Key& key, Json desired,
                                         std::string_view subresource, bool check_rv) {
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    return Status::NotFound(r.GroupResource() + " \"" + key.name + "\" not found");
  }
  const Json old = it->second;
  const Json& dmd = desired["metadata"];
  if (check_rv && dmd.contains("resourceVersion") &&
      dmd["resourceVersion"] != old["metadata"]["resourceVersion"]) {
    return StatusFromHttp(409, Json{{"reason", "Conflict"},
                                    {"message", "Operation cannot be fulfilled on " +
                                                    r.GroupResource() + " \"" + key.name +
                                                    "\": the object has been modified"}});
  }
  Json next = old;
  if (subresource == "status") {
    if (desired.contains("status")) next["status"] = desired["status"];
    else next.erase("status");
  } else {
    Json keep_status = old.contains("status") ? old["status"] : Json();
    for (const auto& [k, v] : desired.items()) {
      if (k != "metadata" && k != "status") next[k] = v;
    }
    for (const char* f : {"labels", "annotations", "finalizers", "ownerReferences"}) {
      if (dmd.contains(f)) next["metadata"][f] = dmd[f];
      else next["metadata"].erase(f);
    }
    if (HasStatusSubresource(r)) {
      if (keep_status.is_null()) next.erase("status");
      else next["status"] = keep_status;
    } else if (desired.contains("status")) {
      next["status"] = desired["status"];
    }
    if (WithoutStatusAndMeta(next) != WithoutStatusAndMeta(old)) {
      next["metadata"]["generation"] = old["metadata"].value("generation", 1) + 1;
    }
  }
  if (next == old) return old;  // no-op writes do not bump resourceVersion
  next["metadata"]["resourceVersion"] = NextRv();
  if (IsDeleting(next) && !HasFinalizers(next)) {
    RemoveLocked(key);
    EmitLocked(key, WatchEventType::kDeleted, next, old);
    return next;
  }
  it->second = next;
  EmitLocked(key, WatchEventType::kModified, next, old);
  return next;
}

Result<Json> FakeKubeClient::Update(const Resource& r, std::string_view ns, const Json& object,
                                    std::string_view subresource) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(TakeFault("update"));
  Key key{r.GroupResource(), std::string(ns), object["metadata"].value("name", "")};
  Record(subresource.empty() ? "update" : "update/" + std::string(subresource), r, ns, key.name);
  return WriteLocked(r, key, object, subresource, true);
}

Result<Json> FakeKubeClient::Patch(const Resource& r, std::string_view ns, std::string_view name,
                                   PatchType type, const Json& patch,
                                   std::string_view subresource, const PatchOptions&) {
  if (type == PatchType::kApply && subresource.empty() &&
      IsNotFound(Get(r, ns, name).status())) {
    Json obj = patch;  // server-side apply creates a missing object
    obj["metadata"]["name"] = std::string(name);
    return Create(r, ns, obj);
  }
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(TakeFault("patch"));
  Key key{r.GroupResource(), std::string(ns), std::string(name)};
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    return Status::NotFound(r.GroupResource() + " \"" + key.name + "\" not found");
  }
  Record(subresource.empty() ? "patch" : "patch/" + std::string(subresource), r, ns, name);
  Json merged = it->second;
  merged.merge_patch(patch);
  bool check_rv = patch.contains("metadata") && patch["metadata"].contains("resourceVersion");
  if (check_rv) merged["metadata"]["resourceVersion"] = patch["metadata"]["resourceVersion"];
  return WriteLocked(r, key, merged, subresource, check_rv);
}

void FakeKubeClient::RemoveLocked(const Key& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  std::string uid = it->second["metadata"].value("uid", "");
  objects_.erase(it);
  if (!uid.empty()) CollectGarbageLocked(uid);
}

void FakeKubeClient::CollectGarbageLocked(const std::string& owner_uid) {
  std::vector<Key> dependents;
  for (const auto& [key, obj] : objects_) {
    for (const Json& ref : obj["metadata"].value("ownerReferences", Json::array())) {
      if (ref.value("uid", "") == owner_uid) dependents.push_back(key);
    }
  }
  for (const Key& key : dependents) {
    auto it = objects_.find(key);
    if (it == objects_.end()) continue;
    Json old = it->second;
    if (HasFinalizers(old)) {
      if (!IsDeleting(old)) {
        it->second["metadata"]["deletionTimestamp"] = FormatTime(clock_->Now());
        it->second["metadata"]["resourceVersion"] = NextRv();
        EmitLocked(key, WatchEventType::kModified, it->second, old);
      }
      continue;
    }
    ++rv_;
    RemoveLocked(key);
    EmitLocked(key, WatchEventType::kDeleted, old, old);
  }
}

Status FakeKubeClient::Delete(const Resource& r, std::string_view ns, std::string_view name,
                              const DeleteOptions& opts) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(TakeFault("delete"));
  Key key{r.GroupResource(), std::string(ns), std::string(name)};
  auto it = objects_.find(key);
  if (it == objects_.end()) {
    return Status::NotFound(r.GroupResource() + " \"" + key.name + "\" not found");
  }
  const Json& md = it->second["metadata"];
  if ((!opts.precondition_uid.empty() && md.value("uid", "") != opts.precondition_uid) ||
      (!opts.precondition_resource_version.empty() &&
       md.value("resourceVersion", "") != opts.precondition_resource_version)) {
    return StatusFromHttp(409, Json{{"reason", "Conflict"}, {"message", "precondition failed"}});
  }
  Record("delete", r, ns, name);
  Json old = it->second;
  if (HasFinalizers(old)) {
    if (IsDeleting(old)) return Status::Ok();
    it->second["metadata"]["deletionTimestamp"] = FormatTime(clock_->Now());
    it->second["metadata"]["resourceVersion"] = NextRv();
    EmitLocked(key, WatchEventType::kModified, it->second, old);
    return Status::Ok();
  }
  ++rv_;
  RemoveLocked(key);
  Json gone = old;
  gone["metadata"]["resourceVersion"] = std::to_string(rv_);
  EmitLocked(key, WatchEventType::kDeleted, gone, old);
  return Status::Ok();
}

Status FakeKubeClient::DeleteCollection(const Resource& r, std::string_view ns,
                                        std::string_view label_selector) {
  ListOptions opts;
  opts.label_selector = std::string(label_selector);
  ASSIGN_OR_RETURN(Json list, List(r, ns, opts));
  for (const Json& item : list["items"]) {
    Status s = Delete(r, item["metadata"].value("namespace", ""),
                      item["metadata"]["name"].get<std::string>());
    if (!s.ok() && !IsNotFound(s)) return s;
  }
  return Status::Ok();
}

Status FakeKubeClient::Watch(const Resource& r, std::string_view ns, const WatchOptions& opts,
                             const WatchHandler& handler, const CancelToken& cancel) {
  ASSIGN_OR_RETURN(LabelSelector sel, LabelSelector::Parse(opts.label_selector));
  std::unique_lock lock(mu_);
  RETURN_IF_ERROR(TakeFault("watch"));
  const std::string gr = r.GroupResource();
  const uint64_t epoch = watch_epoch_;
  std::vector<WatchEvent> pending;
  int64_t from = 0;
  if (opts.resource_version.empty() || opts.resource_version == "0") {
    for (const auto& [key, obj] : objects_) {
      if (key.gr == gr && (ns.empty() || key.ns == ns) && sel.MatchesObject(obj)) {
        pending.push_back({WatchEventType::kAdded, obj});
      }
    }
    from = rv_;
  } else {
    from = std::stoll(opts.resource_version);
    if (from < compacted_rv_) {
      return StatusFromHttp(410, Json{{"message", "too old resource version: " +
                                                      opts.resource_version}});
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.timeout_seconds);
  size_t pos = 0;  // history is append-only between compactions
  while (true) {
    if (pos > history_.size()) pos = 0;  // compacted meanwhile; `from` still filters
    for (; pos < history_.size(); ++pos) {
      const Event& e = history_[pos];
      if (e.rv <= from || e.gr != gr || (!ns.empty() && e.ns != ns)) continue;
      bool now_match = sel.MatchesObject(e.object);
      bool was_match = !e.old_object.is_null() && sel.MatchesObject(e.old_object);
      WatchEventType type = e.type;
      if (type == WatchEventType::kModified && now_match && !was_match) type = WatchEventType::kAdded;
      if (type == WatchEventType::kModified && !now_match && was_match) type = WatchEventType::kDeleted;
      if (type == WatchEventType::kDeleted ? (now_match || was_match) : now_match) {
        pending.push_back({type, e.object});
      }
    }
    if (!history_.empty()) from = std::max(from, history_.back().rv);
    lock.unlock();
    for (const WatchEvent& ev : pending) {
      if (!handler(ev)) return Status::Ok();
    }
    pending.clear();
    lock.lock();
    if (cancel.IsCancelled() || std::chrono::steady_clock::now() >= deadline) return Status::Ok();
    if (watch_epoch_ != epoch) return Status::Unavailable("watch closed: apiserver restarted");
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (watch_epoch_ != epoch) return Status::Unavailable("watch closed: apiserver restarted");
  }
}

}  // namespace kubicle::kube
