// Records core/v1 Events about objects, like client-go's EventRecorder: a
// repeat of the same (object, type, reason, message) bumps the existing
// Event's count instead of creating a new one. Best effort: a failure to
// record is logged, never returned, so it cannot fail a reconcile.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "kube/clock.h"
#include "kube/kube_client.h"

namespace kubicle::kube {

class EventRecorder {
 public:
  EventRecorder(KubeClient* client, std::string component, std::string instance,
                const Clock* clock = &RealClock::Instance());
  // type is "Normal" or "Warning"; reason is CamelCase.
  void Record(const Json& object, std::string_view type, std::string_view reason,
              std::string_view message);

 private:
  struct Seen {
    std::string name;
    int count;
  };
  KubeClient* client_;
  std::string component_, instance_;
  const Clock* clock_;
  std::mutex mu_;
  std::map<std::string, Seen> seen_;
};

}  // namespace kubicle::kube
