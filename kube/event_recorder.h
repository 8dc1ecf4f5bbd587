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
//
// Bursts are aggregated, as client-go's EventCorrelator does (its
// EventAggregator folds similar Events into one "(combined from similar
// events)" Event; its spam filter is a token bucket): similar Events (same
// namespace, involved kind, type and reason; any object, any message) take
// a token from a bucket of `burst`, refilled at one per `refill` of the
// injected clock. Without a token an Event is folded instead of sent; the
// folded ones go out as one combined Event (count = how many, the last
// one's object and message) once `refill` of real time has passed since
// the first was folded, or on Flush. So a burst of 100 Sandboxes placed at
// once costs the apiserver ~burst + 1 Event writes, not 100, while a
// steady trickle is recorded one by one.
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
  int burst = 10;  // similar Events sent one by one before folding; <= 0: never fold
  std::chrono::milliseconds refill{1000};  // one token back per interval (> 0)
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
  // Blocks until every Event queued or folded so far has been sent (or
  // dropped), or `timeout` passed; true if none is left. For tests and
  // shutdown.
  bool Flush(std::chrono::milliseconds timeout);
  // Events dropped because the queue was full.
  uint64_t dropped() const;

 private:
  struct Pending {
    Json involved;  // involvedObject
    std::string ns, name, type, reason, message, time, dedup;
    int count = 1;  // > 1: a combined Event standing for this many
  };
  struct Bucket {
    double tokens = 0;
    TimePoint last;
  };
  struct Folded {
    Pending last;
    int count = 0;
  };
  struct Seen {
    std::string name;
    int count;
  };
  // Whether a similar Event may be sent now (takes a token); under mu_.
  bool TakeToken(const std::string& similar);
  // Moves every folded group to the queue as one combined Event; under mu_.
  void QueueFolded();
  void SendLoop();
  void Send(const Pending& e);

  KubeClient* client_;
  std::string component_, instance_;
  const Clock* clock_;
  EventRecorderOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // work for the sender, or a Flush to wake
  std::deque<Pending> queue_;
  std::map<std::string, Bucket> buckets_;  // by similarity key
  std::map<std::string, Folded> folded_;   // by similarity key
  std::chrono::steady_clock::time_point first_folded_;  // when folded_ became non-empty
  bool flush_folded_ = false;  // a Flush wants the folded ones now
  bool sending_ = false;  // the sender holds an Event taken off the queue
  bool stopping_ = false;
  uint64_t dropped_ = 0;
  std::map<std::string, Seen> seen_;  // sender thread only
  std::thread sender_;
};

}  // namespace kubicle::kube
