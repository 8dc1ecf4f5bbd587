#include "noderuntime/api/routes.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace kubicle::noderuntime::api {

namespace {

std::vector<std::string_view> Split(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

const char* Pattern(Route r) {
  switch (r) {
    case Route::kHealthz: return "/healthz";
    case Route::kMetrics: return "/metrics";
    case Route::kTemplates: return "/v1/templates";
    case Route::kTemplate: return "/v1/templates/{name}";
    case Route::kRun: return "/v1/templates/{name}/run";
    case Route::kSandboxes: return "/v1/sandboxes";
    case Route::kSandbox: return "/v1/sandboxes/{id}";
    case Route::kFork: return "/v1/sandboxes/{id}/fork";
    case Route::kSuspend: return "/v1/sandboxes/{id}/suspend";
    case Route::kResume: return "/v1/sandboxes/{id}/resume";
    case Route::kExec: return "/v1/sandboxes/{id}/exec";
    case Route::kFiles: return "/v1/sandboxes/{id}/files";
    case Route::kConsole: return "/v1/sandboxes/{id}/console";
    case Route::kStats: return "/v1/sandboxes/{id}/stats";
    case Route::kStat: return "/v1/sandboxes/{id}/stat";
    case Route::kList: return "/v1/sandboxes/{id}/ls";
    case Route::kPort: return "/v1/sandboxes/{id}/ports/{port}";
    case Route::kWorkspaces: return "/v1/workspaces";
    case Route::kWorkspace: return "/v1/workspaces/{name}";
    case Route::kWorkspaceFiles: return "/v1/workspaces/{name}/files";
    case Route::kWorkspaceStat: return "/v1/workspaces/{name}/stat";
    case Route::kWorkspaceList: return "/v1/workspaces/{name}/ls";
  }
  return "?";
}

}  // namespace

std::optional<RouteMatch> MatchRoute(std::string_view path) {
  if (path.empty() || path.front() != '/' || path.find("//") != std::string_view::npos) {
    return std::nullopt;
  }
  auto p = Split(path);
  if (p.size() == 1 && p[0] == "healthz") return RouteMatch{Route::kHealthz, ""};
  if (p.size() == 1 && p[0] == "metrics") return RouteMatch{Route::kMetrics, ""};
  if (p.size() < 2 || p[0] != "v1") return std::nullopt;
  if (p[1] == "templates") {
    if (p.size() == 2) return RouteMatch{Route::kTemplates, ""};
    if (p.size() == 3) return RouteMatch{Route::kTemplate, std::string(p[2])};
    if (p.size() == 4 && p[3] == "run") return RouteMatch{Route::kRun, std::string(p[2])};
    return std::nullopt;
  }
  if (p[1] == "workspaces") {
    if (p.size() == 2) return RouteMatch{Route::kWorkspaces, ""};
    if (p.size() == 3) return RouteMatch{Route::kWorkspace, std::string(p[2])};
    if (p.size() != 4) return std::nullopt;
    if (p[3] == "files") return RouteMatch{Route::kWorkspaceFiles, std::string(p[2])};
    if (p[3] == "stat") return RouteMatch{Route::kWorkspaceStat, std::string(p[2])};
    if (p[3] == "ls") return RouteMatch{Route::kWorkspaceList, std::string(p[2])};
    return std::nullopt;
  }
  if (p[1] != "sandboxes") return std::nullopt;
  if (p.size() == 2) return RouteMatch{Route::kSandboxes, ""};
  std::string id(p[2]);
  if (p.size() == 3) return RouteMatch{Route::kSandbox, id};
  if (p.size() == 5 && p[3] == "ports") return RouteMatch{Route::kPort, id, std::string(p[4])};
  if (p.size() != 4) return std::nullopt;
  if (p[3] == "fork") return RouteMatch{Route::kFork, id};
  if (p[3] == "suspend") return RouteMatch{Route::kSuspend, id};
  if (p[3] == "resume") return RouteMatch{Route::kResume, id};
  if (p[3] == "exec") return RouteMatch{Route::kExec, id};
  if (p[3] == "files") return RouteMatch{Route::kFiles, id};
  if (p[3] == "console") return RouteMatch{Route::kConsole, id};
  if (p[3] == "stats") return RouteMatch{Route::kStats, id};
  if (p[3] == "stat") return RouteMatch{Route::kStat, id};
  if (p[3] == "ls") return RouteMatch{Route::kList, id};
  return std::nullopt;
}

std::string AllowedMethods(Route r) {
  switch (r) {
    case Route::kHealthz:
    case Route::kMetrics:
    case Route::kTemplates:
    case Route::kConsole:
    case Route::kStats:
    case Route::kStat:
    case Route::kList:
    case Route::kWorkspaces:
    case Route::kWorkspaceStat:
    case Route::kWorkspaceList:
    case Route::kPort: return "GET";
    case Route::kWorkspace:
    case Route::kWorkspaceFiles: return "GET, PUT, DELETE";
    case Route::kTemplate: return "GET, PUT, DELETE";
    case Route::kSandboxes: return "GET, POST, DELETE";
    case Route::kSandbox: return "GET, DELETE";
    case Route::kFork:
    case Route::kSuspend:
    case Route::kResume:
    case Route::kRun:
    case Route::kExec: return "POST";
    case Route::kFiles: return "GET, PUT, DELETE";
  }
  return "";
}

bool MethodAllowed(Route r, std::string_view method) {
  if (method.empty()) return false;
  std::string allowed = AllowedMethods(r);
  size_t i = 0;
  while (i < allowed.size()) {
    size_t j = allowed.find(", ", i);
    if (j == std::string::npos) j = allowed.size();
    if (std::string_view(allowed).substr(i, j - i) == method) return true;
    i = j + 2;
  }
  return false;
}

Access RouteAccess(Route r, std::string_view method) {
  switch (r) {
    case Route::kHealthz:
    case Route::kMetrics: return Access::kPublic;
    case Route::kExec:
    case Route::kFiles:
    case Route::kConsole:
    case Route::kStats:
    case Route::kStat:
    case Route::kList:
    case Route::kPort:
    // The sandbox's owner may park and wake its own VM, as it may exec in it.
    case Route::kSuspend:
    case Route::kResume: return Access::kAdminOrSandbox;
    case Route::kSandbox: return method == "GET" ? Access::kAdminOrSandbox : Access::kAdmin;
    case Route::kRun: return Access::kAdminOrRunToken;
    case Route::kWorkspaceFiles:
    case Route::kWorkspaceStat:
    case Route::kWorkspaceList: return Access::kAdminOrWorkspace;
    case Route::kWorkspace: return method == "GET" ? Access::kAdminOrWorkspace : Access::kAdmin;
    default: return Access::kAdmin;
  }
}

std::string RouteLabel(Route r, std::string_view method) {
  return std::string(method) + " " + Pattern(r);
}

BodyKind RouteBody(Route r, std::string_view method) {
  if ((r == Route::kFiles || r == Route::kWorkspaceFiles) && method == "PUT") return BodyKind::kFile;
  if (r == Route::kSuspend || r == Route::kResume) return BodyKind::kNone;
  if (method == "POST" || method == "PUT") return BodyKind::kJson;
  return BodyKind::kNone;
}

std::optional<uint16_t> ParsePort(std::string_view s) {
  if (s.empty() || s.size() > 5 || s.front() == '0') return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

std::optional<std::string> PercentDecode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    int hi = i + 1 < s.size() ? hex(s[i + 1]) : -1;
    int lo = i + 2 < s.size() ? hex(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

std::optional<Target> ParseTarget(std::string_view target) {
  size_t q = target.find('?');
  std::string_view raw_query = q == std::string_view::npos ? "" : target.substr(q + 1);
  // A fragment is never sent by clients; drop it as a URL parser would.
  if (size_t h = raw_query.find('#'); h != std::string_view::npos) raw_query = raw_query.substr(0, h);
  Target t;
  auto path = PercentDecode(target.substr(0, q));
  if (!path) return std::nullopt;
  t.path = std::move(*path);
  size_t i = 0;
  while (i < raw_query.size()) {
    size_t j = raw_query.find('&', i);
    if (j == std::string_view::npos) j = raw_query.size();
    std::string_view pair = raw_query.substr(i, j - i);
    i = j + 1;
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    auto key = PercentDecode(pair.substr(0, eq));
    auto value = PercentDecode(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    if (!key || !value) return std::nullopt;
    t.query[*key] = std::move(*value);
  }
  return t;
}

std::optional<std::string> ParseBearer(std::string_view h) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (h.size() <= kPrefix.size()) return std::nullopt;
  for (size_t i = 0; i < kPrefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(h[i])) !=
        std::tolower(static_cast<unsigned char>(kPrefix[i]))) {
      return std::nullopt;
    }
  }
  std::string_view token = h.substr(kPrefix.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty() || token.find(' ') != std::string_view::npos) return std::nullopt;
  return std::string(token);
}

}  // namespace kubicle::noderuntime::api
