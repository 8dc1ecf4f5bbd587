// ApiServer: kubicle-node's HTTP API (docs/node.md, "HTTP API") on a
// cpprestsdk listener, over a SandboxService.
//
// Contracts:
//  - Every request is answered: a cpprestsdk or service exception becomes a
//    500 and never escapes a handler; a client that goes away mid-reply is
//    ignored.
//  - Bad input is refused with a 4xx JSON error before the service is called,
//    so a refused request changes no state.
//  - Auth: "Authorization: Bearer <token>". The admin token allows every
//    route; a sandbox's data-plane token allows GET of that sandbox, exec and
//    files on it. No or a wrong token: 401; a sandbox token on a route it may
//    not use (delete, fork): 403. /healthz and /metrics need no token.
//  - Records kubicle_http_request_seconds{route,code} in the registry (one
//    ApiServer per registry: the family is registered by the constructor).
//  - Each request is handled on a thread of its own (service calls block:
//    a create returns once the VM answers, an exec when the command ends),
//    at most 1,024 at once (more get 503), so /healthz and short calls
//    answer however many long execs run.
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
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::api {

struct ApiServerOptions {
  std::string admin_token;                     // required, non-empty
  size_t max_json_bytes = 1 << 20;             // JSON request bodies
  size_t max_file_bytes = 64u << 20;           // PUT .../files bodies
};

class ApiServer {
 public:
  ApiServer(SandboxService* service, metrics::Registry* registry, ApiServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Listens on http://host:port. Unavailable if the address cannot be bound.
  Status Start(const std::string& host, int port);
  // Stops accepting, then waits for the requests in flight, at most `grace`
  // (forever if unset). True when none is left. The destructor waits forever.
  bool Stop(std::optional<std::chrono::milliseconds> grace = std::nullopt);

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;  // shared with the request threads
};

// A port free on 127.0.0.1 right now (bind to port 0, read it, close).
Result<int> PickFreePort();

}  // namespace kubicle::noderuntime::api
