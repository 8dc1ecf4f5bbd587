// Internal to noderuntime/server: one HTTP request being answered (Call) and
// the route handlers. Handlers reply exactly once through Call (or stream
// through it); Call is independent of the HTTP server underneath, which
// has already read the body within the route's limit and checked auth.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "noderuntime/server/api_server.h"
#include "noderuntime/server/http_server.h"
#include "noderuntime/api/routes.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

int HttpCodeFor(StatusCode code);
Response JsonResponse(int code, const nlohmann::json& body);
// {"error": {"code": err, "message": message}}
Response ErrorResponse(int code, std::string_view err, const std::string& message);

class Call {
 public:
  Call(std::string method, RouteMatch match, std::map<std::string, std::string> query,
       std::string body, std::shared_ptr<Responder> responder)
      : method_(std::move(method)),
        match_(std::move(match)),
        query_(std::move(query)),
        body_(std::move(body)),
        responder_(std::move(responder)) {}

  const std::string& name() const { return match_.name; }
  const std::string& port() const { return match_.port; }
  Route route() const { return match_.route; }
  const std::string& method() const { return method_; }
  // A query parameter (decoded), or nullopt.
  std::optional<std::string> Query(const std::string& key) const;
  // Query keys not in `known` give a 400 (typos surface): returns false after replying.
  bool OnlyQuery(std::initializer_list<const char*> known);

  int code() const { return code_; }
  bool replied() const { return code_ != 0; }

  void Json(int code, const nlohmann::json& body);
  void Error(int code, std::string_view err, const std::string& message);
  // Maps the Status code to HTTP (sandbox_service.h's table).
  void Fail(const Status& status);
  void Raw(int code, const std::vector<unsigned char>& body, const std::string& content_type);
  void Send(Response response);
  // A streamed answer (chunked): the request's latency is recorded when the
  // handler returns instead. Write blocks while the client is behind (see
  // Responder) and returns false once it is gone.
  void StartStream(int code, const std::string& content_type);
  bool Write(std::string data);
  // Ends a streamed answer; a no-op otherwise and when already ended.
  void EndStream();
  // Ends a streamed answer as failed (the client sees a truncated body).
  void AbortStream();
  // Answers 101 and relays the connection to `upstream` (Responder::
  // SwitchProtocols), keeping the stream hold (SetStreamHold) until the
  // relay ends.
  void Upgrade(UniqueFd upstream);
  void SetStreamHold(std::shared_ptr<void> hold) { stream_hold_ = std::move(hold); }
  // Called with the status code just before a complete response is sent, so
  // metrics are recorded before the client can see the answer.
  void SetObserver(std::function<void(int code)> observer) { observer_ = std::move(observer); }

  // The body (read by the server within the route's limit); replies 413 and
  // returns nullopt when it is over `limit`. Moves it out: call once.
  std::optional<std::string> Body(size_t limit);
  // The body parsed as one JSON object (400/413 replied on failure).
  std::optional<nlohmann::json> JsonBody(size_t limit);

 private:
  std::string method_;
  RouteMatch match_;
  std::map<std::string, std::string> query_;
  std::string body_;
  std::shared_ptr<Responder> responder_;
  int code_ = 0;
  bool streaming_ = false;
  std::function<void(int)> observer_;
  std::shared_ptr<void> stream_hold_;
};

// Route handlers (handlers.cc, exec_files.cc). Auth is already checked.
void HandleTemplates(Call& call, TemplateService& svc, const ApiServerOptions& opts);
void HandleTemplate(Call& call, TemplateService& svc, const ApiServerOptions& opts);
void HandleSandboxes(Call& call, SandboxLifecycle& svc, const ApiServerOptions& opts);
void HandleSandbox(Call& call, SandboxLifecycle& svc, const ApiServerOptions& opts);
void HandleFork(Call& call, SandboxLifecycle& svc, const ApiServerOptions& opts);
// POST /v1/sandboxes/{id}/suspend and /resume.
void HandleSuspendResume(Call& call, SandboxLifecycle& svc, const ApiServerOptions& opts);
// A streamed exec checks the sandbox exists (SandboxLifecycle) first.
void HandleExec(Call& call, GuestIo& svc, SandboxLifecycle& sandboxes,
                const ApiServerOptions& opts);
// run.cc: POST /v1/templates/{name}/run.
// The template must be Ready here (TemplateService) before a VM is taken.
void HandleRun(Call& call, RunService& svc, TemplateService& templates,
               const ApiServerOptions& opts);
void HandleFiles(Call& call, GuestIo& svc, const ApiServerOptions& opts);
// console_stats.cc. A followed console ends once `stopping` is set.
// A followed console ends with the sandbox's state (SandboxLifecycle).
void HandleConsole(Call& call, GuestIo& svc, SandboxLifecycle& sandboxes, const ApiServerOptions& opts,
                   const std::atomic<bool>& stopping);
void HandleStats(Call& call, GuestIo& svc, const ApiServerOptions& opts);
// exec_files.cc: one file's metadata, a directory's entries (DELETE of a
// file is HandleFiles).
void HandleStat(Call& call, GuestIo& svc, const ApiServerOptions& opts);
void HandleList(Call& call, GuestIo& svc, const ApiServerOptions& opts);
// ports.cc: a guest TCP port as an upgraded connection.
void HandlePort(Call& call, GuestIo& svc);

// The file routes of a sandbox (through its agent) and of a workspace
// (through the node's ext4 helper) answer alike: one set of handlers over
// the calls of the thing the path names.
struct FileOps {
  bool (*check_name)(Call& call);  // replies 400 and returns false on a bad name
  std::function<Status(const std::string&, const guest::client::FileChunkFn&)> read;
  std::function<Status(const std::string&, guest::protocol::ByteSpan, uint32_t)> write;
  std::function<Result<guest::protocol::StatReply>(const std::string&)> stat;
  std::function<Result<std::vector<guest::protocol::DirEntry>>(const std::string&)> list;
  std::function<Status(const std::string&, bool)> remove;
};
void ServeFiles(Call& call, const FileOps& ops, const ApiServerOptions& opts);
void ServeStat(Call& call, const FileOps& ops);
void ServeList(Call& call, const FileOps& ops);
// workspaces.cc (docs/workspaces.md).
void HandleWorkspaces(Call& call, WorkspaceService& svc, const ApiServerOptions& opts);
void HandleWorkspace(Call& call, WorkspaceService& svc, const ApiServerOptions& opts);
void HandleWorkspaceFiles(Call& call, WorkspaceService& svc, const ApiServerOptions& opts);
void HandleWorkspaceStat(Call& call, WorkspaceService& svc, const ApiServerOptions& opts);
void HandleWorkspaceList(Call& call, WorkspaceService& svc, const ApiServerOptions& opts);

}  // namespace kubicle::noderuntime::server
