// Internal to noderuntime/api: one HTTP request being answered (Call) and
// the route handlers. Handlers reply exactly once through Call; Call
// observes every reply task so a vanished client never raises.
#pragma once

#include <cpprest/http_msg.h>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "noderuntime/api/api_server.h"
#include "noderuntime/api/routes.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::api {

int HttpCodeFor(StatusCode code);

class Call {
 public:
  Call(web::http::http_request req, RouteMatch match, std::map<std::string, std::string> query)
      : req_(std::move(req)), match_(std::move(match)), query_(std::move(query)) {}

  web::http::http_request& req() { return req_; }
  const std::string& name() const { return match_.name; }
  Route route() const { return match_.route; }
  std::string method() const { return req_.method(); }
  // A query parameter (decoded), or nullopt.
  std::optional<std::string> Query(const std::string& key) const;
  // Query keys not in `known` give a 400 (typos surface): returns false after replying.
  bool OnlyQuery(std::initializer_list<const char*> known);

  int code() const { return code_; }
  bool replied() const { return code_ != 0; }

  void Json(int code, const nlohmann::json& body);
  // {"error": {"code": err, "message": message}}
  void Error(int code, std::string_view err, const std::string& message);
  // Maps the Status code to HTTP (sandbox_service.h's table).
  void Fail(const Status& status);
  void Raw(int code, std::vector<unsigned char> body, const std::string& content_type);
  // Sends a prepared response. `streamed`: the body is still being produced,
  // so the request's latency is recorded when the handler returns instead.
  void Send(web::http::http_response response, bool streamed = false);
  // Called with the status code just before a complete response is sent, so
  // metrics are recorded before the client can see the answer.
  void SetObserver(std::function<void(int code)> observer) { observer_ = std::move(observer); }

  // The body, at most `limit` bytes; replies 413 (or 400) and returns nullopt
  // when it is larger or cannot be read.
  std::optional<std::string> Body(size_t limit);
  // The body parsed as one JSON object (400/413 replied on failure).
  std::optional<nlohmann::json> JsonBody(size_t limit);

 private:
  web::http::http_request req_;
  RouteMatch match_;
  std::map<std::string, std::string> query_;
  int code_ = 0;
  std::function<void(int)> observer_;
};

// Route handlers (handlers.cc, exec_files.cc). Auth is already checked.
void HandleTemplates(Call& call, SandboxService& svc, const ApiServerOptions& opts);
void HandleTemplate(Call& call, SandboxService& svc, const ApiServerOptions& opts);
void HandleSandboxes(Call& call, SandboxService& svc, const ApiServerOptions& opts);
void HandleSandbox(Call& call, SandboxService& svc, const ApiServerOptions& opts);
void HandleFork(Call& call, SandboxService& svc, const ApiServerOptions& opts);
void HandleExec(Call& call, SandboxService& svc, const ApiServerOptions& opts);
void HandleFiles(Call& call, SandboxService& svc, const ApiServerOptions& opts);

}  // namespace kubicle::noderuntime::api
