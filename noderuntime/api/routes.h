// The node API's routing table: which path is which route, which methods it
// takes, who may call it, and the route's name in metrics. Pure functions,
// tested without a listener.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/constant_time.h"
#include "common/status.h"

namespace kubicle::noderuntime::api {

enum class Route {
  kHealthz,     // GET /healthz                       (no auth)
  kMetrics,     // GET /metrics                       (no auth)
  kTemplates,   // GET /v1/templates
  kTemplate,    // GET|PUT|DELETE /v1/templates/{name}
  kRun,         // POST /v1/templates/{name}/run      (a per-call run)
  kSandboxes,   // GET|POST|DELETE /v1/sandboxes
  kSandbox,     // GET|DELETE /v1/sandboxes/{id}
  kFork,        // POST /v1/sandboxes/{id}/fork
  kSuspend,     // POST /v1/sandboxes/{id}/suspend   (no body)
  kResume,      // POST /v1/sandboxes/{id}/resume    (no body)
  kExec,        // POST /v1/sandboxes/{id}/exec
  kFiles,       // GET|PUT|DELETE /v1/sandboxes/{id}/files
  kConsole,     // GET /v1/sandboxes/{id}/console
  kStats,       // GET /v1/sandboxes/{id}/stats
  kStat,        // GET /v1/sandboxes/{id}/stat?path=   (one file's metadata)
  kList,        // GET /v1/sandboxes/{id}/ls?path=     (a directory's entries)
  kPort,        // GET /v1/sandboxes/{id}/ports/{port} (Upgrade: kubicle-tcp)
  // ---- workspaces (docs/workspaces.md) ----
  kWorkspaces,       // GET /v1/workspaces
  kWorkspace,        // GET|PUT|DELETE /v1/workspaces/{name}
  kWorkspaceFiles,   // GET|PUT|DELETE /v1/workspaces/{name}/files?path=
  kWorkspaceStat,    // GET /v1/workspaces/{name}/stat?path=
  kWorkspaceList,    // GET /v1/workspaces/{name}/ls?path=
};

struct RouteMatch {
  Route route;
  std::string name;  // the {name} or {id} segment, percent-decoded; else empty
  std::string port;  // kPort's {port} segment, percent-decoded (ParsePort reads it)
};

// The route for an (already percent-decoded) path; nullopt for unknown paths.
// A trailing slash is tolerated.
std::optional<RouteMatch> MatchRoute(std::string_view path);
bool MethodAllowed(Route route, std::string_view method);
// "GET, PUT, DELETE" for the Allow header of a 405.
std::string AllowedMethods(Route route);
// Who may call it: no token, only the admin token, also the data-plane
// token of the sandbox named in the path, or also the run token of the
// template named in the path.
// kAdminOrWorkspace: also the token of the workspace named in the path.
enum class Access { kPublic, kAdmin, kAdminOrSandbox, kAdminOrRunToken, kAdminOrWorkspace };
Access RouteAccess(Route route, std::string_view method);
// The route label of kubicle_http_request_seconds, e.g. "POST /v1/sandboxes/{id}/exec".
std::string RouteLabel(Route route, std::string_view method);

// What body a route takes, which sets the limit the server reads it with:
// none (GET, DELETE: any body byte is refused), a JSON document, or a file.
enum class BodyKind { kNone, kJson, kFile };
BodyKind RouteBody(Route route, std::string_view method);

// A request target ("/v1/sandboxes?labelSelector=a%3Db") split into its
// percent-decoded path and query parameters. nullopt for a malformed
// percent-encoding. '+' is kept as is (the labelSelector reader treats it).
struct Target {
  std::string path;
  std::map<std::string, std::string> query;
};
std::optional<Target> ParseTarget(std::string_view target);
// Percent-decoding; nullopt when a '%' is not followed by two hex digits.
std::optional<std::string> PercentDecode(std::string_view s);

// A TCP port as a path segment: 1..65535 in decimal, digits only, no sign,
// no leading zero (one spelling per port); nullopt otherwise.
std::optional<uint16_t> ParsePort(std::string_view s);
// The protocol a port stream upgrades to (compared case-insensitively).
inline constexpr char kPortUpgrade[] = "kubicle-tcp";

using ::kubicle::ConstantTimeEqual;  // common/constant_time.h
// The token of an "Authorization: Bearer <token>" header; nullopt if the
// header is not of that form.
std::optional<std::string> ParseBearer(std::string_view header);

}  // namespace kubicle::noderuntime::api
