// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it:
// the holder renews spec.renewTime every retry period; a candidate takes the
// Lease over only when the record (holder, renewTime) it last saw has not
// changed for leaseDurationSeconds of its *own* clock (so clock skew between
// machines does not matter). Writes carry the resourceVersion, so two
// candidates racing for an expired Lease cannot both win. A leader that
// cannot renew within renew_deadline stops leading.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "kube/clock.h"
#include "kube/kube_client.h"

namespace kubicle::kube {

struct LeaderElectionConfig {
  std::string ns;
  std::string lease_name;
  std::string identity;
  Duration lease_duration = std::chrono::seconds(15);
  Duration renew_deadline = std::chrono::seconds(10);
  Duration retry_period = std::chrono::seconds(2);
};

class LeaderElector {
 public:
  LeaderElector(KubeClient* client, LeaderElectionConfig config,
                const Clock* clock = &RealClock::Instance());

  // One attempt to acquire or renew. True when we hold the Lease afterwards.
  Result<bool> TryAcquireOrRenew();
  // Blocks until cancelled or leadership is lost: acquires, calls
  // on_started, renews; calls on_stopped when it stops leading.
  void Run(const CancelToken& cancel, const std::function<void()>& on_started,
           const std::function<void()>& on_stopped);
  // Gives the Lease up (clean shutdown) so another candidate need not wait.
  Status Release();
  bool IsLeader() const;

 private:
  Json NewSpec(const Json& old_spec) const;

  KubeClient* client_;
  LeaderElectionConfig config_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::string observed_record_;  // holder + renewTime last seen
  TimePoint observed_at_{};
  bool leader_ = false;
  TimePoint last_renew_{};
};

}  // namespace kubicle::kube
