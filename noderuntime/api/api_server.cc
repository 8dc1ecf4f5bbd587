#include "noderuntime/api/api_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cpprest/http_listener.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "common/log.h"
#include "common/unique_fd.h"
#include "noderuntime/api/codec.h"
#include "noderuntime/api/http_call.h"

namespace kubicle::noderuntime::api {

namespace http = web::http;
using http::experimental::listener::http_listener;

using Clock = std::chrono::steady_clock;

class ApiServer::Impl : public std::enable_shared_from_this<ApiServer::Impl> {
 public:
  Impl(SandboxService* svc, metrics::Registry* registry, ApiServerOptions opts)
      : svc_(svc),
        registry_(registry),
        opts_(std::move(opts)),
        latency_(registry->AddHistogram("kubicle_http_request_seconds",
                                        "HTTP API request latency by route and status code",
                                        {"route", "code"},
                                        metrics::ExponentialBuckets(0.0005, 2, 16))) {}

  // The listener's callback: runs Handle on a thread of its own, so service
  // calls that block (a create, a long exec) never hold cpprestsdk's I/O
  // threads and /healthz answers however many execs run. Over
  // kMaxInFlight requests at once, the extra ones get a 503.
  void Accept(http::http_request req);
  void Handle(http::http_request req);
  // Waits until no request is in flight, at most `grace` (forever if unset).
  bool WaitIdle(std::optional<std::chrono::milliseconds> grace);
  bool admin_token_empty() const { return opts_.admin_token.empty(); }
  std::unique_ptr<http_listener> listener;

 private:
  // Sets *observed once the latency has been recorded at reply time.
  void Dispatch(http::http_request& req, Clock::time_point start, std::string& route_label,
                int* code, bool* observed);
  void Observe(const std::string& route_label, int code, Clock::time_point start);
  // Replies 401/403 and returns false when the caller may not use the route.
  bool Authorize(Call& call);

  SandboxService* svc_;
  metrics::Registry* registry_;
  ApiServerOptions opts_;
  metrics::Family<metrics::Histogram>& latency_;

  static constexpr size_t kMaxInFlight = 1024;
  std::mutex in_flight_mu_;
  std::condition_variable in_flight_cv_;
  size_t in_flight_ = 0;
};

namespace {

void ReplyMethodNotAllowed(Call& call, Route route, const std::string& method,
                           const std::string& path) {
  http::http_response resp(http::status_codes::MethodNotAllowed);
  resp.headers().add("Allow", AllowedMethods(route));
  nlohmann::json body{{"error",
                       {{"code", "MethodNotAllowed"},
                        {"message", method + " is not allowed on " + path + " (allowed: " +
                                        AllowedMethods(route) + ")"}}}};
  resp.set_body(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                "application/json");
  call.Send(std::move(resp));
}

// Query parameters, percent-decoded. Throws on malformed encoding.
std::map<std::string, std::string> DecodeQuery(const std::string& raw) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : web::uri::split_query(raw)) {
    out[web::uri::decode(k)] = web::uri::decode(v);
  }
  return out;
}

}  // namespace

void ApiServer::Impl::Accept(http::http_request req) {
  bool admitted = false;
  {
    std::lock_guard l(in_flight_mu_);
    if (in_flight_ < kMaxInFlight) {
      ++in_flight_;
      admitted = true;
    }
  }
  auto done = [self = shared_from_this()] {
    std::lock_guard l(self->in_flight_mu_);
    if (--self->in_flight_ == 0) self->in_flight_cv_.notify_all();
  };
  if (admitted) {
    try {
      std::thread([self = shared_from_this(), req, done]() mutable {
        self->Handle(std::move(req));
        done();
      }).detach();
      return;
    } catch (const std::system_error&) {
      done();  // no thread: answer 503 below
    }
  }
  try {
    req.reply(503, R"({"error":{"code":"Unavailable","message":"too many requests in flight"}})",
              "application/json")
        .then([](pplx::task<void> t) {
          try {
            t.get();
          } catch (const std::exception&) {
          }
        });
  } catch (const std::exception&) {
  }
  latency_.WithLabels({"overload", "503"}).Observe(0);
}

bool ApiServer::Impl::WaitIdle(std::optional<std::chrono::milliseconds> grace) {
  std::unique_lock l(in_flight_mu_);
  auto idle = [this] { return in_flight_ == 0; };
  if (!grace) {
    in_flight_cv_.wait(l, idle);
    return true;
  }
  return in_flight_cv_.wait_for(l, *grace, idle);
}

void ApiServer::Impl::Handle(http::http_request req) {
  auto start = Clock::now();
  std::string route_label = "unmatched";
  int code = 0;
  bool observed = false;
  try {
    Dispatch(req, start, route_label, &code, &observed);
  } catch (const std::exception& e) {
    log::Error("api handler failed", {{"route", route_label}, {"error", e.what()}});
    code = 0;
  } catch (...) {
    log::Error("api handler failed", {{"route", route_label}, {"error", "non-standard exception"}});
    code = 0;
  }
  if (code == 0) {
    // Nobody answered (an exception): answer 500 so the client is not left hanging.
    code = 500;
    try {
      req.reply(500, R"({"error":{"code":"Internal","message":"internal error"}})",
                "application/json")
          .then([](pplx::task<void> t) {
            try {
              t.get();
            } catch (const std::exception&) {
            }
          });
    } catch (const std::exception&) {
    }
  }
  if (!observed) Observe(route_label, code, start);
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

void ApiServer::Impl::Dispatch(http::http_request& req, Clock::time_point start,
                               std::string& route_label, int* code, bool* observed) {
  std::string path;
  std::map<std::string, std::string> query;
  try {
    path = web::uri::decode(req.relative_uri().path());
    query = DecodeQuery(req.relative_uri().query());
  } catch (const std::exception&) {
    Call bad(req, RouteMatch{Route::kHealthz, ""}, {});
    bad.Error(400, "InvalidArgument", "malformed percent-encoding in the URL");
    *code = bad.code();
    return;
  }
  auto match = MatchRoute(path);
  Call call(req, match.value_or(RouteMatch{Route::kHealthz, ""}), std::move(query));
  call.SetObserver([&, this](int c) {
    Observe(route_label, c, start);
    *observed = true;
  });
  if (!match) {
    call.Error(404, "NotFound", "no route " + path);
    *code = call.code();
    return;
  }
  const std::string method = req.method();
  if (!MethodAllowed(match->route, method)) {
    route_label = RouteLabel(match->route, "other");
    ReplyMethodNotAllowed(call, match->route, method, path);
    *code = call.code();
    return;
  }
  route_label = RouteLabel(match->route, method);
  if (Authorize(call)) {
    switch (match->route) {
      case Route::kHealthz:
        call.Json(200, {{"status", "ok"}});
        break;
      case Route::kMetrics: {
        http::http_response resp(http::status_codes::OK);
        resp.set_body(registry_->Render(), "text/plain; version=0.0.4; charset=utf-8");
        call.Send(std::move(resp));
        break;
      }
      case Route::kTemplates: HandleTemplates(call, *svc_, opts_); break;
      case Route::kTemplate: HandleTemplate(call, *svc_, opts_); break;
      case Route::kSandboxes: HandleSandboxes(call, *svc_, opts_); break;
      case Route::kSandbox: HandleSandbox(call, *svc_, opts_); break;
      case Route::kFork: HandleFork(call, *svc_, opts_); break;
      case Route::kExec: HandleExec(call, *svc_, opts_); break;
      case Route::kFiles: HandleFiles(call, *svc_, opts_); break;
    }
  }
  *code = call.code();
}

bool ApiServer::Impl::Authorize(Call& call) {
  Access access = RouteAccess(call.route(), call.method());
  if (access == Access::kPublic) return true;
  auto& headers = call.req().headers();
  auto it = headers.find(http::header_names::authorization);
  if (it == headers.end()) {
    call.Error(401, "Unauthenticated", "missing \"Authorization: Bearer <token>\" header");
    return false;
  }
  auto token = ParseBearer(it->second);
  if (!token) {
    call.Error(401, "Unauthenticated", "the Authorization header is not \"Bearer <token>\"");
    return false;
  }
  if (ConstantTimeEquals(*token, opts_.admin_token)) return true;
  // A sandbox token is only checked against the sandbox the path names.
  bool sandbox_ok = !call.name().empty() && call.route() != Route::kTemplate &&
                    ValidId(call.name()) && svc_->CheckToken(call.name(), *token);
  if (sandbox_ok && access == Access::kAdminOrSandbox) return true;
  if (sandbox_ok) {
    call.Error(403, "PermissionDenied",
               "a sandbox token may only get, exec in and move files of its sandbox; " +
                   call.method() + " " + RouteLabel(call.route(), "").substr(1) +
                   " needs the node's admin token");
    return false;
  }
  call.Error(401, "Unauthenticated", "the token is not valid for this request");
  return false;
}

ApiServer::ApiServer(SandboxService* service, metrics::Registry* registry,
                     ApiServerOptions options)
    : impl_(std::make_shared<Impl>(service, registry, std::move(options))) {}

ApiServer::~ApiServer() { Stop(std::nullopt); }

Status ApiServer::Start(const std::string& host, int port) {
  if (impl_->admin_token_empty()) return Status::InvalidArgument("the admin token is empty");
  const std::string url = "http://" + host + ":" + std::to_string(port);
  try {
    impl_->listener = std::make_unique<http_listener>(url);
    Impl* impl = impl_.get();
    // Raw pointer: the listener is closed before the Impl goes away.
    impl_->listener->support([impl](http::http_request req) { impl->Accept(std::move(req)); });
    impl_->listener->open().wait();
    return Status::Ok();
  } catch (const std::exception& e) {
    impl_->listener.reset();
    return Status::Unavailable("listening on " + url + ": " + e.what());
  }
}

bool ApiServer::Stop(std::optional<std::chrono::milliseconds> grace) {
  if (impl_->listener) {
    try {
      impl_->listener->close().wait();
    } catch (const std::exception&) {
    }
    impl_->listener.reset();
  }
  return impl_->WaitIdle(grace);
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

}  // namespace kubicle::noderuntime::api
