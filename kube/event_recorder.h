// Records core/v1 Events about objects, like client-go's EventRecorder: a
// repeat of the same (object, type, reason, message) bumps the existing
// Event's count instead of creating a new one. Best effort: a failure to
// record is logged, never returned, so it cannot fail a reconcile.
//
// Asynchronous, as client-go's broadcaster is: Record only queues (bounded;
// beyond `max_pending` an Event is dropped and counted), and one sender
// thread, started on the first Record, makes the API calls. So a reconcile
// never waits for an Event's round trip on the hot path. Destruction sends
// what is queued for at most `drain_timeout`, then drops the rest (an Event
// already in flight ends with the client's own request timeout).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "kube/clock.h"
#include "kube/kube_client.h"

namespace kubicle::kube {

struct EventRecorderOptions {
  size_t max_pending = 1000;  // client-go's broadcaster queue length
  std::chrono::milliseconds drain_timeout{2000};
};

class EventRecorder {
 public:
  EventRecorder(KubeClient* client, std::string component, std::string instance,
                const Clock* clock = &RealClock::Instance(), EventRecorderOptions options = {});
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // type is "Normal" or "Warning"; reason is CamelCase. Returns at once.
  void Record(const Json& object, std::string_view type, std::string_view reason,
              std::string_view message);
  // Blocks until every Event queued so far has been sent (or dropped), or
  // `timeout` passed; true if none is left. For tests and shutdown.
  bool Flush(std::chrono::milliseconds timeout);
  // Events dropped because the queue was full.
  uint64_t dropped() const;

 private:
  struct Pending {
    Json involved;  // involvedObject
    std::string ns, name, type, reason, message, time, dedup;
  };
  struct Seen {
    std::string name;
    int count;
  };
  void SendLoop();
  void Send(const Pending& e);

  KubeClient* client_;
  std::string component_, instance_;
  const Clock* clock_;
  EventRecorderOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // work for the sender, or a Flush to wake
  std::deque<Pending> queue_;
  bool sending_ = false;  // the sender holds an Event taken off the queue
  bool stopping_ = false;
  uint64_t dropped_ = 0;
  std::map<std::string, Seen> seen_;  // sender thread only
  std::thread sender_;
};

}  // namespace kubicle::kube
