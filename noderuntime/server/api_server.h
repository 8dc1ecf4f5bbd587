// ApiServer: kubicle-node's HTTP API (docs/node.md, "HTTP API") over a
// SandboxService, on the front-door server of http_server.h (Boost.Beast).
//
// Contracts:
//  - Every request is answered: a service exception becomes a 500 and never
//    escapes a handler; a client that goes away mid-reply is ignored.
//  - Limits come before reads (docs/node.md, "Limits and fairness"): the
//    route, method, auth and budget are decided from the header alone; a
//    refused request is answered (4xx/503) without reading its body and its
//    connection closed. Bodies are read within the route's limit
//    (max_json_bytes, max_file_bytes, none on GET/DELETE).
//  - Bad input is refused with a 4xx JSON error before the service is called,
//    so a refused request changes no state.
//  - Auth: "Authorization: Bearer <token>". The admin token allows every
//    route; a sandbox's data-plane token allows GET of that sandbox, exec and
//    files on it. No or a wrong token: 401; a sandbox token on a route it may
//    not use (delete, fork): 403. A template's run token (SetRunToken)
//    allows POST /v1/templates/{name}/run of that template only.
//    /healthz and /metrics need no token.
//  - Fairness: requests in flight are budgeted per class (admission.h): at
//    most max_in_flight_per_sandbox per sandbox token (429 past it),
//    max_in_flight_tenants for all sandbox tokens, and separate budgets for
//    the admin token and for /healthz and /metrics (503 past them), so one
//    tenant cannot starve the node, the operator or the other tenants.
//  - Ports (docs/api.md): GET /v1/sandboxes/{id}/ports/{port} with
//    "Connection: Upgrade" and "Upgrade: kubicle-tcp" answers 101 and then
//    relays the connection to that TCP port of the guest (426 without the
//    upgrade). An open stream spends a slot of its own budget, not of the
//    requests in flight: max_port_streams_per_token per token (429 past
//    it), max_port_streams in all (503).
//  - Records kubicle_http_request_seconds{route,code},
//    kubicle_http_refused_total{reason}, kubicle_http_connections and
//    kubicle_http_in_flight{class}, kubicle_port_streams in the registry (one ApiServer per
//    registry: the families are registered by the constructor).
//  - Each admitted request is handled on a thread of its own (service calls
//    block: a create returns once the VM answers, an exec when the command
//    ends); /healthz and /metrics answer on the I/O threads.
//  - Start/Stop are not thread-safe with each other. The service and the
//    registry must outlive every request: Stop() waits for the requests in
//    flight; if it returns false (grace expired) they still run and the
//    service must stay alive (a daemon then exits without destroying it).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "noderuntime/server/http_server.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::server {

struct ApiServerOptions {
  std::string admin_token;                     // required, non-empty
  size_t max_json_bytes = 1 << 20;             // JSON request bodies
  size_t max_file_bytes = 64u << 20;           // PUT .../files bodies
  // The front door (http_server.h).
  size_t max_header_bytes = 16 << 10;          // request line + fields: 431 past it
  size_t max_connections = 4096;               // at most half of RLIMIT_NOFILE
  std::chrono::milliseconds header_timeout{10000};  // a header, from its first byte
  std::chrono::milliseconds idle_timeout{60000};    // between keep-alive requests
  std::chrono::milliseconds body_timeout{60000};    // a whole body
  std::chrono::milliseconds write_timeout{30000};   // an answer making no progress
  size_t stream_high_water = 1 << 20;          // streamed exec bytes queued per request
  // GET .../console?follow=true: how often the log is looked at, and the
  // idle time after which a {"offset"} line shows the client it is alive.
  std::chrono::milliseconds console_poll_interval{200};
  std::chrono::milliseconds console_heartbeat{10000};
  int io_threads = 2;
  // Requests in flight (admission.h).
  size_t max_in_flight_per_sandbox = 8;
  size_t max_in_flight_per_run_token = 16;  // per-call runs of one template's token
  size_t max_in_flight_tenants = 1024;
  size_t max_in_flight_admin = 256;
  size_t max_in_flight_health = 64;
  // Port streams (their connects included): per token (each sandbox's,
  // and the admin's), and all together.
  size_t max_port_streams_per_token = 16;
  size_t max_port_streams = 1024;
  std::chrono::milliseconds port_idle_timeout{15 * 60 * 1000};  // no byte either way
  size_t port_buffer_bytes = 64 << 10;                          // per direction
  // TLS (both set): the serving certificate chain and its key, PEM. Unset:
  // plain HTTP.
  std::string tls_cert_pem;
  std::string tls_key_pem;
};

// The roles the routes call (sandbox_service.h), each used by the handlers
// of its routes only; every one must be set. A SandboxService (the node's
// SandboxManager) is all of them.
struct ServiceRoles {
  TemplateService* templates = nullptr;
  SandboxLifecycle* sandboxes = nullptr;
  GuestIo* guest = nullptr;
  RunService* runs = nullptr;
  WorkspaceService* workspaces = nullptr;
  TokenService* tokens = nullptr;  // the Gate's auth
  static ServiceRoles Of(SandboxService* all) { return {all, all, all, all, all, all}; }
};

class ApiServer {
 public:
  ApiServer(ServiceRoles roles, metrics::Registry* registry, ApiServerOptions options);
  ApiServer(SandboxService* service, metrics::Registry* registry, ApiServerOptions options)
      : ApiServer(ServiceRoles::Of(service), registry, std::move(options)) {}
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Listens on http(s)://host:port. Unavailable if the address cannot be
  // bound; InvalidArgument if the TLS certificate or key is bad.
  Status Start(const std::string& host, int port);
  // Stops accepting, then waits for the requests in flight, at most `grace`
  // (forever if unset). True when none is left. The destructor waits forever.
  bool Stop(std::optional<std::chrono::milliseconds> grace = std::nullopt);

  // What Start puts in front of the routes: the HTTP limits from the
  // options, and the Gate (route, auth and budget, from the header) and
  // EventSink over this server. Public so the connection code can be driven
  // without a port or I/O threads (fuzz/noderuntime/http_server_fuzzer.cc);
  // the Gate and EventSink are valid while this ApiServer lives.
  struct FrontDoor {
    HttpLimits limits;
    Gate gate;
    EventSink events;
  };
  FrontDoor front_door() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;  // shared with the request threads
};

// A port free on 127.0.0.1 right now (bind to port 0, read it, close).
Result<int> PickFreePort();

}  // namespace kubicle::noderuntime::server
