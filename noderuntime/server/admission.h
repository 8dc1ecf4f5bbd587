// Admission: the node API's budgets of requests in flight, one per class of
// caller, so that no class can spend another's share (docs/node.md,
// "Limits and fairness").
//
//  - health: GET /healthz and /metrics (no token);
//  - admin: requests with the node's admin token;
//  - tenants: requests with a sandbox's token, all sandboxes together, and
//    each sandbox alone (`per_tenant`): one tenant with a thousand stalled
//    connections holds `per_tenant` slots, the other tenants keep theirs and
//    the admin and health paths never see it.
//
// Contracts:
//  - A slot is taken when a request's header has been read and authorized,
//    before any body byte is read, and given back when the Ticket is
//    destroyed (the server keeps it until the answer has been written or the
//    connection is gone): a client that stalls in its body or stops reading
//    its answer spends its own budget, nobody else's.
//  - Thread-safe. The Admission must outlive its Tickets.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace kubicle::noderuntime::server {

class Admission {
 public:
  enum class Class { kHealth, kAdmin, kTenant };
  struct Limits {
    size_t health = 64;
    size_t admin = 256;
    size_t tenants = 1024;   // every sandbox token together
    size_t per_tenant = 8;   // one sandbox's token
    size_t per_run_token = 16;  // one template's run token (RunTenant)
  };
  // Why a request was refused.
  enum class Refusal { kNone, kClassFull, kTenantFull };

  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept { *this = std::move(o); }
    Ticket& operator=(Ticket&& o) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }
    void Release();

   private:
    friend class Admission;
    Admission* owner_ = nullptr;
    Class class_ = Class::kHealth;
    std::string tenant_;
  };

  explicit Admission(Limits limits) : limits_(limits) {}

  // A slot of `c` (and of `tenant`, a sandbox id or RunTenant(template), for
  // kTenant), or nullopt with *why set when that budget is spent. A run
  // token's tenant is capped at per_run_token, a sandbox's at per_tenant.
  std::optional<Ticket> TryAcquire(Class c, const std::string& tenant, Refusal* why);

  // The tenant key of a template's run token: never a sandbox id (ids
  // have no '/').
  static std::string RunTenant(const std::string& template_name) { return "run/" + template_name; }
  static bool IsRunTenant(const std::string& tenant) { return tenant.rfind("run/", 0) == 0; }

  size_t in_flight() const;
  size_t in_flight(Class c) const;
  size_t in_flight_of(const std::string& tenant) const;
  const Limits& limits() const { return limits_; }
  // Waits until no slot is held, at most `grace` (forever if unset).
  bool WaitIdle(std::optional<std::chrono::milliseconds> grace);

 private:
  void Give(Class c, const std::string& tenant);
  size_t& CountOf(Class c);

  const Limits limits_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  size_t health_ = 0, admin_ = 0, tenants_ = 0;
  std::map<std::string, size_t> per_tenant_;  // only tenants holding slots
};

}  // namespace kubicle::noderuntime::server
