#include "noderuntime/server/api_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <optional>

#include "common/log.h"
#include "common/unique_fd.h"
#include "noderuntime/server/admission.h"
#include "noderuntime/api/codec.h"
#include "noderuntime/server/http_call.h"
#include "noderuntime/server/http_server.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

using Clock = std::chrono::steady_clock;

namespace {

HttpLimits LimitsFrom(const ApiServerOptions& o) {
  HttpLimits l;
  l.max_header_bytes = o.max_header_bytes;
  l.max_connections = o.max_connections;
  l.header_timeout = o.header_timeout;
  l.idle_timeout = o.idle_timeout;
  l.body_timeout = o.body_timeout;
  l.write_timeout = o.write_timeout;
  l.stream_high_water = o.stream_high_water;
  l.io_threads = o.io_threads;
  l.relay_buffer_bytes = o.port_buffer_bytes;
  l.relay_idle_timeout = o.port_idle_timeout;
  return l;
}

Admission::Limits BudgetsFrom(const ApiServerOptions& o) {
  return {.health = o.max_in_flight_health,
          .admin = o.max_in_flight_admin,
          .tenants = o.max_in_flight_tenants,
          .per_tenant = o.max_in_flight_per_sandbox,
          .per_run_token = o.max_in_flight_per_run_token};
}

// Port streams use the tenant class only: one budget per token, one for all.
Admission::Limits StreamBudgetsFrom(const ApiServerOptions& o) {
  return {.health = 0, .admin = 0, .tenants = o.max_port_streams,
          .per_tenant = o.max_port_streams_per_token};
}
// ASCII only: protocol tokens are.
bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// The admin token's streams are budgeted like a sandbox's, under a key no
// sandbox id can be (ids are DNS-1123 labels).
constexpr char kAdminStreams[] = "(admin)";

const char* ClassName(Admission::Class c) {
  switch (c) {
    case Admission::Class::kHealth: return "health";
    case Admission::Class::kAdmin: return "admin";
    case Admission::Class::kTenant: break;
  }
  return "sandbox";
}

}  // namespace

class ApiServer::Impl : public std::enable_shared_from_this<ApiServer::Impl> {
 public:
  Impl(ServiceRoles roles, metrics::Registry* registry, ApiServerOptions opts)
      : svc_(roles),
        registry_(registry),
        opts_(std::move(opts)),
        admission_(BudgetsFrom(opts_)),
        streams_(StreamBudgetsFrom(opts_)),
        latency_(registry->AddHistogram("kubicle_http_request_seconds",
                                        "HTTP API request latency by route and status code",
                                        {"route", "code"},
                                        metrics::ExponentialBuckets(0.0005, 2, 16))),
        refused_(registry->AddCounter("kubicle_http_refused_total",
                                      "HTTP requests and connections refused or closed by the "
                                      "front door, by reason",
                                      {"reason"})) {}

  // Called once the metric families can reach this Impl (weakly: the
  // registry may outlive the server).
  void RegisterGauges();
  // The Gate: decides from the header alone, on an I/O thread.
  Decision Decide(const RequestHead& head);
  void Refused(const char* reason) { refused_.WithLabels({reason}).Inc(); }
  bool admin_token_empty() const { return opts_.admin_token.empty(); }
  const ApiServerOptions& options() const { return opts_; }
  Admission& admission() { return admission_; }
  std::unique_ptr<HttpServer> http;
  // Set by Stop: long-lived answers (a followed console) end on it.
  std::atomic<bool> stopping{false};

 private:
  // Nullopt when the caller may use the route (*cls, *tenant say whose
  // budget it spends), else the 401/403 to answer.
  std::optional<Response> Authorize(const RouteMatch& m, const std::string& method,
                                    const std::string& authorization, Admission::Class* cls,
                                    std::string* tenant);
  Decision Refuse(const std::string& route_label, Response r, const char* reason,
                  Clock::time_point start);
  // kPort's checks from the header: the upgrade asked for, the port, a slot
  // of the stream budget (*hold). Nullopt when they pass, else the refusal.
  std::optional<Decision> AdmitPortStream(const RequestHead& head, const RouteMatch& m,
                                          Admission::Class cls, const std::string& tenant,
                                          const std::string& label, Clock::time_point start,
                                          std::shared_ptr<void>* hold);
  // On the request's thread.
  void Handle(Call& call, const std::string& route_label, Clock::time_point start);
  void Dispatch(Call& call);
  void Observe(const std::string& route_label, int code, Clock::time_point start);

  ServiceRoles svc_;
  metrics::Registry* registry_;
  ApiServerOptions opts_;
  Admission admission_;
  Admission streams_;
  metrics::Family<metrics::Histogram>& latency_;
  metrics::Family<metrics::Counter>& refused_;
};

void ApiServer::Impl::RegisterGauges() {
  std::weak_ptr<Impl> weak = weak_from_this();
  registry_->AddGaugeCallback("kubicle_http_connections", "Open HTTP API connections", {},
                              [weak]() -> std::vector<std::pair<metrics::LabelValues, double>> {
                                auto self = weak.lock();
                                if (!self || !self->http) return {{{}, 0}};
                                return {{{}, double(self->http->connections())}};
                              });
  registry_->AddGaugeCallback(
      "kubicle_http_in_flight", "HTTP API requests admitted and not yet answered, by budget",
      {"class"}, [weak]() -> std::vector<std::pair<metrics::LabelValues, double>> {
        std::vector<std::pair<metrics::LabelValues, double>> out;
        auto self = weak.lock();
        for (auto c : {Admission::Class::kHealth, Admission::Class::kAdmin,
                       Admission::Class::kTenant}) {
          out.push_back({{ClassName(c)}, self ? double(self->admission_.in_flight(c)) : 0});
        }
        return out;
      });
  registry_->AddGaugeCallback(
      "kubicle_port_streams", "Guest-port streams open (or connecting) through the data plane",
      {}, [weak]() -> std::vector<std::pair<metrics::LabelValues, double>> {
        auto self = weak.lock();
        return {{{}, self ? double(self->streams_.in_flight(Admission::Class::kTenant)) : 0}};
      });
}

void ApiServer::Impl::Observe(const std::string& route_label, int code, Clock::time_point start) {
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  latency_.WithLabels({route_label, std::to_string(code)}).Observe(secs);
  if (code >= 500) {
    log::Warn("http request failed", {{"route", route_label}, {"code", code}, {"ms", secs * 1000}});
  } else {
    log::Debug("http request", {{"route", route_label}, {"code", code}, {"ms", secs * 1000}});
  }
}

Decision ApiServer::Impl::Refuse(const std::string& route_label, Response r, const char* reason,
                                 Clock::time_point start) {
  Observe(route_label, r.code, start);
  Refused(reason);
  return r;
}

Decision ApiServer::Impl::Decide(const RequestHead& head) {
  const auto start = Clock::now();
  auto target = ParseTarget(head.target);
  if (!target) {
    return Refuse("unmatched",
                  ErrorResponse(400, "InvalidArgument", "malformed percent-encoding in the URL"),
                  "bad_request", start);
  }
  auto match = MatchRoute(target->path);
  if (!match) {
    return Refuse("unmatched", ErrorResponse(404, "NotFound", "no route " + target->path),
                  "not_found", start);
  }
  const Route route = match->route;
  if (!MethodAllowed(route, head.method)) {
    Response r = ErrorResponse(405, "MethodNotAllowed",
                               head.method + " is not allowed on " + target->path +
                                   " (allowed: " + AllowedMethods(route) + ")");
    r.headers.push_back({"Allow", AllowedMethods(route)});
    return Refuse(RouteLabel(route, "other"), std::move(r), "method_not_allowed", start);
  }
  std::string label = RouteLabel(route, head.method);
  Admission::Class cls = Admission::Class::kHealth;
  std::string tenant;
  if (auto denied = Authorize(*match, head.method, head.authorization, &cls, &tenant)) {
    const char* reason = denied->code == 401 ? "unauthenticated" : "forbidden";
    return Refuse(label, std::move(*denied), reason, start);
  }
  const BodyKind kind = RouteBody(route, head.method);
  if (kind == BodyKind::kNone && (head.chunked || head.content_length.value_or(0) > 0)) {
    return Refuse(label, ErrorResponse(413, "PayloadTooLarge", label + " takes no request body"),
                  "body_too_large", start);
  }
  std::shared_ptr<void> stream_hold;
  if (route == Route::kPort) {
    if (auto refused = AdmitPortStream(head, *match, cls, tenant, label, start, &stream_hold)) {
      return std::move(*refused);
    }
  }
  Admission::Refusal why = Admission::Refusal::kNone;
  auto ticket = admission_.TryAcquire(cls, tenant, &why);
  if (!ticket) {
    const bool run = Admission::IsRunTenant(tenant);
    Response r = why == Admission::Refusal::kTenantFull
                     ? ErrorResponse(429, "ResourceExhausted",
                                     (run ? "the run token of template " + tenant.substr(4)
                                          : "sandbox " + tenant) +
                                         " already has " +
                                         std::to_string(run ? opts_.max_in_flight_per_run_token
                                                            : opts_.max_in_flight_per_sandbox) +
                                         " requests in flight")
                     : ErrorResponse(503, "Unavailable",
                                     std::string("too many ") + ClassName(cls) +
                                         " requests in flight");
    r.headers.push_back({"Retry-After", "1"});
    return Refuse(label, std::move(r),
                  why == Admission::Refusal::kTenantFull ? "sandbox_limit" : "class_limit", start);
  }
  Admitted a;
  a.body_limit = kind == BodyKind::kFile   ? opts_.max_file_bytes
                 : kind == BodyKind::kJson ? opts_.max_json_bytes
                                           : 0;
  a.inline_handler = route == Route::kHealthz || route == Route::kMetrics;
  a.hold = std::make_shared<Admission::Ticket>(std::move(*ticket));
  a.handler = [self = shared_from_this(), method = head.method, match = std::move(*match),
               query = std::move(target->query), label = std::move(label),
               start, stream_hold = std::move(stream_hold)](
                  std::string body, std::shared_ptr<Responder> responder) mutable {
    Call call(std::move(method), std::move(match), std::move(query), std::move(body),
              std::move(responder));
    call.SetStreamHold(std::move(stream_hold));
    self->Handle(call, label, start);
  };
  return a;
}

std::optional<Decision> ApiServer::Impl::AdmitPortStream(
    const RequestHead& head, const RouteMatch& m, Admission::Class cls,
    const std::string& tenant, const std::string& label, Clock::time_point start,
    std::shared_ptr<void>* hold) {
  if (!EqualsIgnoringCase(head.upgrade, kPortUpgrade)) {
    Response r = ErrorResponse(426, "UpgradeRequired",
                               label + " needs \"Connection: Upgrade\" and \"Upgrade: " +
                                   kPortUpgrade + "\"");
    r.headers.push_back({"Upgrade", kPortUpgrade});
    return Refuse(label, std::move(r), "upgrade_required", start);
  }
  if (!ParsePort(m.port)) {
    return Refuse(label,
                  ErrorResponse(400, "InvalidArgument",
                                "port \"" + m.port + "\" must be a number from 1 to 65535"),
                  "bad_request", start);
  }
  const std::string key = cls == Admission::Class::kAdmin ? kAdminStreams : tenant;
  Admission::Refusal why = Admission::Refusal::kNone;
  auto ticket = streams_.TryAcquire(Admission::Class::kTenant, key, &why);
  if (!ticket) {
    const bool mine = why == Admission::Refusal::kTenantFull;
    Response r = mine ? ErrorResponse(429, "ResourceExhausted",
                                      "this token already has " +
                                          std::to_string(opts_.max_port_streams_per_token) +
                                          " port streams open")
                      : ErrorResponse(503, "Unavailable",
                                      "the node already has " +
                                          std::to_string(opts_.max_port_streams) +
                                          " port streams open");
    r.headers.push_back({"Retry-After", "1"});
    return Refuse(label, std::move(r), mine ? "port_stream_limit" : "port_streams_full", start);
  }
  *hold = std::make_shared<Admission::Ticket>(std::move(*ticket));
  return std::nullopt;
}

std::optional<Response> ApiServer::Impl::Authorize(const RouteMatch& m, const std::string& method,
                                                   const std::string& authorization,
                                                   Admission::Class* cls, std::string* tenant) {
  Access access = RouteAccess(m.route, method);
  if (access == Access::kPublic) {
    *cls = Admission::Class::kHealth;
    return std::nullopt;
  }
  if (authorization.empty()) {
    return ErrorResponse(401, "Unauthenticated", "missing \"Authorization: Bearer <token>\" header");
  }
  auto token = ParseBearer(authorization);
  if (!token) {
    return ErrorResponse(401, "Unauthenticated",
                         "the Authorization header is not \"Bearer <token>\"");
  }
  if (ConstantTimeEqual(*token, opts_.admin_token)) {
    *cls = Admission::Class::kAdmin;
    return std::nullopt;
  }
  if (access == Access::kAdminOrRunToken) {
    // A run token is only checked against the template the path names.
    if (ValidId(m.name) && svc_.tokens->CheckRunToken(m.name, *token)) {
      *cls = Admission::Class::kTenant;
      *tenant = Admission::RunTenant(m.name);
      return std::nullopt;
    }
    return ErrorResponse(401, "Unauthenticated",
                         "the token is not the run token of template \"" + m.name + "\"");
  }
  if (access == Access::kAdminOrWorkspace || m.route == Route::kWorkspace ||
      m.route == Route::kWorkspaces) {
    // A workspace token is only checked against the workspace the path names.
    const bool workspace_ok = !m.name.empty() && ValidId(m.name) &&
                              svc_.tokens->CheckWorkspaceToken(m.name, *token);
    if (workspace_ok && access == Access::kAdminOrWorkspace) {
      *cls = Admission::Class::kTenant;
      *tenant = "workspace/" + m.name;
      return std::nullopt;
    }
    if (workspace_ok) {
      return ErrorResponse(403, "PermissionDenied",
                           "a workspace token may only get its workspace and move its files; " +
                               method + " " + RouteLabel(m.route, "").substr(1) +
                               " needs the node's admin token");
    }
    return ErrorResponse(401, "Unauthenticated", "the token is not valid for this request");
  }
  // A sandbox token is only checked against the sandbox the path names.
  bool sandbox_ok = !m.name.empty() && m.route != Route::kTemplate && ValidId(m.name) &&
                    svc_.tokens->CheckToken(m.name, *token);
  if (sandbox_ok && access == Access::kAdminOrSandbox) {
    *cls = Admission::Class::kTenant;
    *tenant = m.name;
    return std::nullopt;
  }
  if (sandbox_ok) {
    return ErrorResponse(403, "PermissionDenied",
                         "a sandbox token may only get, exec in and move files of its sandbox; " +
                             method + " " + RouteLabel(m.route, "").substr(1) +
                             " needs the node's admin token");
  }
  return ErrorResponse(401, "Unauthenticated", "the token is not valid for this request");
}

void ApiServer::Impl::Handle(Call& call, const std::string& route_label, Clock::time_point start) {
  bool observed = false;
  call.SetObserver([&](int c) {
    Observe(route_label, c, start);
    observed = true;
  });
  try {
    Dispatch(call);
  } catch (const std::exception& e) {
    log::Error("api handler failed", {{"route", route_label}, {"error", e.what()}});
  } catch (...) {
    log::Error("api handler failed", {{"route", route_label}, {"error", "non-standard exception"}});
  }
  if (!call.replied()) call.Error(500, "Internal", "internal error");
  // A streamed answer is ended here too, so an exception mid-stream still
  // terminates the chunked body.
  call.EndStream();
  if (!observed) Observe(route_label, call.code(), start);
}

void ApiServer::Impl::Dispatch(Call& call) {
  switch (call.route()) {
    case Route::kHealthz: return call.Json(200, {{"status", "ok"}});
    case Route::kMetrics: {
      Response r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = registry_->Render();
      return call.Send(std::move(r));
    }
    case Route::kTemplates: return HandleTemplates(call, *svc_.templates, opts_);
    case Route::kTemplate: return HandleTemplate(call, *svc_.templates, opts_);
    case Route::kRun: return HandleRun(call, *svc_.runs, *svc_.templates, opts_);
    case Route::kSandboxes: return HandleSandboxes(call, *svc_.sandboxes, opts_);
    case Route::kSandbox: return HandleSandbox(call, *svc_.sandboxes, opts_);
    case Route::kFork: return HandleFork(call, *svc_.sandboxes, opts_);
    case Route::kSuspend:
    case Route::kResume: return HandleSuspendResume(call, *svc_.sandboxes, opts_);
    case Route::kExec: return HandleExec(call, *svc_.guest, *svc_.sandboxes, opts_);
    case Route::kFiles: return HandleFiles(call, *svc_.guest, opts_);
    case Route::kConsole: return HandleConsole(call, *svc_.guest, *svc_.sandboxes, opts_, stopping);
    case Route::kStats: return HandleStats(call, *svc_.guest, opts_);
    case Route::kStat: return HandleStat(call, *svc_.guest, opts_);
    case Route::kList: return HandleList(call, *svc_.guest, opts_);
    case Route::kPort: return HandlePort(call, *svc_.guest);
    case Route::kWorkspaces: return HandleWorkspaces(call, *svc_.workspaces, opts_);
    case Route::kWorkspace: return HandleWorkspace(call, *svc_.workspaces, opts_);
    case Route::kWorkspaceFiles: return HandleWorkspaceFiles(call, *svc_.workspaces, opts_);
    case Route::kWorkspaceStat: return HandleWorkspaceStat(call, *svc_.workspaces, opts_);
    case Route::kWorkspaceList: return HandleWorkspaceList(call, *svc_.workspaces, opts_);
  }
}

ApiServer::ApiServer(ServiceRoles service, metrics::Registry* registry,
                     ApiServerOptions options)
    : impl_(std::make_shared<Impl>(std::move(service), registry, std::move(options))) {
  impl_->RegisterGauges();
}

ApiServer::~ApiServer() { Stop(std::nullopt); }

Status ApiServer::Start(const std::string& host, int port) {
  if (impl_->admin_token_empty()) return Status::InvalidArgument("the admin token is empty");
  if (impl_->http) return Status::FailedPrecondition("the API server is already started");
  const ApiServerOptions& o = impl_->options();
  if (o.tls_cert_pem.empty() != o.tls_key_pem.empty()) {
    return Status::InvalidArgument("TLS needs both a certificate and its key");
  }
  std::optional<HttpTls> tls;
  if (!o.tls_cert_pem.empty()) tls = HttpTls{o.tls_cert_pem, o.tls_key_pem};
  FrontDoor door = front_door();
  auto http = std::make_unique<HttpServer>(door.limits, std::move(door.gate),
                                           std::move(door.events), std::move(tls));
  Status st = http->Start(host, port);
  if (!st.ok()) return st;
  impl_->http = std::move(http);
  return Status::Ok();
}

ApiServer::FrontDoor ApiServer::front_door() const {
  Impl* impl = impl_.get();
  // Raw pointers: the server's Stop joins its threads before the Impl goes.
  return {LimitsFrom(impl->options()), [impl](const RequestHead& h) { return impl->Decide(h); },
          [impl](const char* reason) { impl->Refused(reason); }};
}

bool ApiServer::Stop(std::optional<std::chrono::milliseconds> grace) {
  impl_->stopping = true;
  if (!impl_->http) return impl_->admission().WaitIdle(grace);
  impl_->http->StopAccepting();
  bool drained = impl_->admission().WaitIdle(grace);
  impl_->http->Stop();
  impl_->http.reset();
  return drained;
}

Result<int> PickFreePort() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return Status::FromErrno("bind 127.0.0.1:0");
  }
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::FromErrno("getsockname");
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace kubicle::noderuntime::server
