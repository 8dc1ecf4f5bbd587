// Waiting on Kubernetes objects the way kubectl wait does: list, then watch
// from the list's resourceVersion, keeping the current set of objects, and
// asking a predicate after the list and after every event. No polling: a
// fan-out of N waits costs one watch, not N gets a second. A watch the
// server ends (its timeout, an apiserver restart, 410 Gone) is resumed or
// re-listed until the deadline.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"
#include "kube/kube_client.h"

namespace kubicle::plugin {

// The objects of the selection by name.
using ObjectSet = std::map<std::string, kube::Json>;
// nullopt: keep waiting; a Status: done (OK) or failed (that error).
using Predicate = std::function<std::optional<Status>(const ObjectSet& objects)>;

struct Selection {
  std::string label_selector;
  std::string name;  // set: only this object (a field selector, and checked here)
};

// DeadlineExceeded when `timeout` passes first; the predicate's last words
// are in the message through `describe` (what is still awaited), if set.
Status WatchUntil(kube::KubeClient& kube, const kube::Resource& resource, const std::string& ns,
                  const Selection& selection, std::chrono::milliseconds timeout,
                  const Predicate& done,
                  const std::function<std::string(const ObjectSet&)>& describe = {});

}  // namespace kubicle::plugin
