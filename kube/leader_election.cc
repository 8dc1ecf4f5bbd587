#include "kube/leader_election.h"

#include <thread>

#include "common/log.h"
#include "kube/time_format.h"

namespace kubicle::kube {

LeaderElector::LeaderElector(KubeClient* client, LeaderElectionConfig config, const Clock* clock)
    : client_(client), config_(std::move(config)), clock_(clock) {}

bool LeaderElector::IsLeader() const {
  std::lock_guard lock(mu_);
  return leader_;
}

Json LeaderElector::NewSpec(const Json& old_spec) const {
  std::string now = FormatMicroTime(clock_->Now());
  Json spec = old_spec.is_object() ? old_spec : Json::object();
  bool taking_over = spec.value("holderIdentity", "") != config_.identity;
  spec["holderIdentity"] = config_.identity;
  spec["leaseDurationSeconds"] =
      std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count();
  spec["renewTime"] = now;
  if (taking_over) {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + (old_spec.is_object() ? 1 : 0);
  }
  return spec;
}

Result<bool> LeaderElector::TryAcquireOrRenew() {
  auto got = client_->Get(LeaseResource(), config_.ns, config_.lease_name);
  std::lock_guard lock(mu_);
  if (!got.ok()) {
    if (!IsNotFound(got.status())) return got.status();
    Json lease = {{"metadata", {{"name", config_.lease_name}, {"namespace", config_.ns}}},
                  {"spec", NewSpec(nullptr)}};
    auto created = client_->Create(LeaseResource(), config_.ns, lease);
    if (!created.ok()) {
      if (IsAlreadyExists(created.status())) return false;
      return created.status();
    }
    leader_ = true;
    last_renew_ = clock_->Now();
    return true;
  }
  Json lease = *got;
  const Json spec = lease.value("spec", Json::object());
  std::string holder = spec.value("holderIdentity", "");
  std::string record = holder + "|" + spec.value("renewTime", "");
  TimePoint now = clock_->Now();
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = now;
  }
  Duration held_for = std::chrono::seconds(spec.value("leaseDurationSeconds", 15));
  if (!holder.empty() && holder != config_.identity && now < observed_at_ + held_for) {
    leader_ = false;
    return false;
  }
  lease["spec"] = NewSpec(spec);
  auto updated = client_->Update(LeaseResource(), config_.ns, lease);
  if (!updated.ok()) {
    if (IsConflict(updated.status())) return false;
    return updated.status();
  }
  observed_record_ = config_.identity + "|" + lease["spec"].value("renewTime", "");
  observed_at_ = now;
  if (!leader_) log::Info("became leader", {{"lease", config_.lease_name}, {"identity", config_.identity}});
  leader_ = true;
  last_renew_ = now;
  return true;
}

void LeaderElector::Run(const CancelToken& cancel, const std::function<void()>& on_started,
                        const std::function<void()>& on_stopped) {
  auto sleep = [&](Duration d) {
    auto end = std::chrono::steady_clock::now() + d;
    while (!cancel.IsCancelled() && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  while (!cancel.IsCancelled()) {
    auto r = TryAcquireOrRenew();
    if (r.ok() && *r) break;
    if (!r.ok()) log::Warn("leader election", {{"error", r.status().ToString()}});
    sleep(config_.retry_period);
  }
  if (cancel.IsCancelled()) return;
  on_started();
  while (!cancel.IsCancelled()) {
    sleep(config_.retry_period);
    if (cancel.IsCancelled()) break;
    auto r = TryAcquireOrRenew();
    bool ok = r.ok() && *r;
    std::lock_guard lock(mu_);
    if (!ok && (clock_->Now() - last_renew_ > config_.renew_deadline || (r.ok() && !*r))) {
      leader_ = false;
      log::Error("lost leadership", {{"lease", config_.lease_name}});
      break;
    }
  }
  on_stopped();
}

Status LeaderElector::Release() {
  auto got = client_->Get(LeaseResource(), config_.ns, config_.lease_name);
  if (!got.ok()) return IsNotFound(got.status()) ? Status::Ok() : got.status();
  Json lease = *got;
  if (lease["spec"].value("holderIdentity", "") != config_.identity) return Status::Ok();
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  std::lock_guard lock(mu_);
  leader_ = false;
  return client_->Update(LeaseResource(), config_.ns, lease).status();
}

}  // namespace kubicle::kube
