#include "noderuntime/server/admission.h"

namespace kubicle::noderuntime::server {

Admission::Ticket& Admission::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    Release();
    owner_ = o.owner_;
    class_ = o.class_;
    tenant_ = std::move(o.tenant_);
    o.owner_ = nullptr;
  }
  return *this;
}

void Admission::Ticket::Release() {
  if (owner_) owner_->Give(class_, tenant_);
  owner_ = nullptr;
}

size_t& Admission::CountOf(Class c) {
  switch (c) {
    case Class::kHealth: return health_;
    case Class::kAdmin: return admin_;
    case Class::kTenant: break;
  }
  return tenants_;
}

std::optional<Admission::Ticket> Admission::TryAcquire(Class c, const std::string& tenant,
                                                       Refusal* why) {
  std::lock_guard l(mu_);
  size_t& n = CountOf(c);
  const size_t cap = c == Class::kHealth  ? limits_.health
                     : c == Class::kAdmin ? limits_.admin
                                          : limits_.tenants;
  // The tenant's own cap first: a tenant over its share is told so (429),
  // whether or not the node as a whole is busy.
  if (c == Class::kTenant) {
    auto it = per_tenant_.find(tenant);
    const size_t tenant_cap = IsRunTenant(tenant) ? limits_.per_run_token : limits_.per_tenant;
    if (it != per_tenant_.end() && it->second >= tenant_cap) {
      *why = Refusal::kTenantFull;
      return std::nullopt;
    }
  }
  if (n >= cap) {
    *why = Refusal::kClassFull;
    return std::nullopt;
  }
  ++n;
  Ticket t;
  t.owner_ = this;
  t.class_ = c;
  if (c == Class::kTenant) {
    ++per_tenant_[tenant];
    t.tenant_ = tenant;
  }
  *why = Refusal::kNone;
  return t;
}

void Admission::Give(Class c, const std::string& tenant) {
  std::lock_guard l(mu_);
  --CountOf(c);
  if (c == Class::kTenant) {
    auto it = per_tenant_.find(tenant);
    if (it != per_tenant_.end() && --it->second == 0) per_tenant_.erase(it);
  }
  if (health_ + admin_ + tenants_ == 0) idle_cv_.notify_all();
}

size_t Admission::in_flight() const {
  std::lock_guard l(mu_);
  return health_ + admin_ + tenants_;
}

size_t Admission::in_flight(Class c) const {
  std::lock_guard l(mu_);
  return c == Class::kHealth ? health_ : c == Class::kAdmin ? admin_ : tenants_;
}

size_t Admission::in_flight_of(const std::string& tenant) const {
  std::lock_guard l(mu_);
  auto it = per_tenant_.find(tenant);
  return it == per_tenant_.end() ? 0 : it->second;
}

bool Admission::WaitIdle(std::optional<std::chrono::milliseconds> grace) {
  std::unique_lock l(mu_);
  auto idle = [this] { return health_ + admin_ + tenants_ == 0; };
  if (!grace) {
    idle_cv_.wait(l, idle);
    return true;
  }
  return idle_cv_.wait_for(l, *grace, idle);
}

}  // namespace kubicle::noderuntime::server
