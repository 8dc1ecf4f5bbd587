#include "plugin/watch_until.h"

#include <thread>

#include "kube/api/types.h"
#include "kube/json_fields.h"

namespace kubicle::plugin {

using kube::Json;
using kube::StrAt;
using Clock = std::chrono::steady_clock;

Status WatchUntil(kube::KubeClient& kube, const kube::Resource& resource, const std::string& ns,
                  const Selection& sel, std::chrono::milliseconds timeout, const Predicate& done,
                  const std::function<std::string(const ObjectSet&)>& describe) {
  const auto deadline = Clock::now() + timeout;
  const std::string field = sel.name.empty() ? "" : "metadata.name=" + sel.name;
  auto wanted = [&](const Json& o) {
    return sel.name.empty() || kube::api::ParseObjectMeta(o).name == sel.name;
  };
  ObjectSet objects;
  std::string rv;
  Status last_error;
  auto timed_out = [&] {
    std::string what = describe ? describe(objects) : "";
    return Status::DeadlineExceeded("timed out after " +
                                    std::to_string(timeout.count() / 1000) + "s" +
                                    (what.empty() ? "" : ": " + what) +
                                    (last_error.ok() ? "" : " (last error: " + last_error.ToString() + ")"));
  };
  while (Clock::now() < deadline) {
    if (rv.empty()) {
      kube::ListOptions lo;
      lo.label_selector = sel.label_selector;
      lo.field_selector = field;
      auto list = kube.List(resource, ns, lo);
      if (!list.ok()) {
        if (list.status().code() == StatusCode::kPermissionDenied ||
            list.status().code() == StatusCode::kInvalidArgument) {
          return list.status();
        }
        last_error = list.status();
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      objects.clear();
      const Json& items = kube::At(*list, {"items"});
      if (items.is_array()) {
        for (const Json& o : items) {
          if (wanted(o)) objects[kube::api::ParseObjectMeta(o).name] = o;
        }
      }
      rv = StrAt(*list, {"metadata", "resourceVersion"});
      if (auto r = done(objects)) return *r;
    }
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now());
    kube::WatchOptions wo;
    wo.label_selector = sel.label_selector;
    wo.field_selector = field;
    wo.resource_version = rv;
    wo.timeout_seconds = static_cast<int>(std::max<int64_t>(1, left.count() + 1));
    std::optional<Status> result;
    kube::CancelToken cancel;
    Status st = kube.Watch(
        resource, ns, wo,
        [&](const kube::WatchEvent& ev) {
          const std::string v = kube::api::ParseObjectMeta(ev.object).resource_version;
          if (!v.empty()) rv = v;
          if (ev.type == kube::WatchEventType::kBookmark || !wanted(ev.object)) return true;
          const std::string name = kube::api::ParseObjectMeta(ev.object).name;
          if (ev.type == kube::WatchEventType::kDeleted) {
            objects.erase(name);
          } else {
            objects[name] = ev.object;
          }
          result = done(objects);
          return !result.has_value() && Clock::now() < deadline;
        },
        cancel);
    if (result) return *result;
    if (!st.ok()) {
      last_error = st;
      rv.clear();  // 410 Gone or a broken stream: list again
      if (!kube::IsGone(st)) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  return timed_out();
}

}  // namespace kubicle::plugin
