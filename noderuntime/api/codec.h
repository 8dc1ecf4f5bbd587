// The node API's wire format: JSON bodies to and from the SandboxService
// structs, base64, and the input checks the API applies before it calls the
// service (docs/node.md, "HTTP API").
//
// Contracts: every *FromJson function takes untrusted JSON and either returns
// a complete value or InvalidArgument naming the offending field; unknown
// top-level fields are rejected (typos surface instead of being ignored).
// Field names are camelCase, as in the Kubernetes API.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/status.h"
#include "noderuntime/api/types.h"

namespace kubicle::noderuntime::api {

using nlohmann::json;

using ::kubicle::Base64Decode;  // common/base64.h: bodies carry bytes as base64
using ::kubicle::Base64Encode;
bool IsValidUtf8(guest::protocol::ByteSpan data);

// A DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
bool ValidId(std::string_view id);
// Kubernetes label keys ([prefix/]name) and values.
Status ValidateLabels(const Labels& labels);

// Parses a request body that must be one JSON object.
Result<json> ParseJsonObject(std::string_view body);

// `name` comes from the URL; a "name" field in the body must equal it.
Result<TemplateSpec> TemplateSpecFromJson(const json& body, const std::string& name);
Result<SandboxSpec> SandboxSpecFromJson(const json& body);
Result<ForkRequest> ForkRequestFromJson(const json& body, const std::string& source_id);
// Fills request and timeout; the caller sets the ExecIo.
Result<ExecOptions> ExecOptionsFromJson(const json& body);

// RFC 3339 UTC with milliseconds: 2026-12-02T15:04:05.123Z.
std::string FormatTime(WallTime t);
json ToJson(const TemplateSpec& spec);
json ToJson(const TemplateInfo& info);
// The token is included only when `with_token` (create and fork answers).
json ToJson(const SandboxInfo& info, bool with_token);
// exitCode/signal/timedOut/truncated plus stdout and stderr: UTF-8 text when
// both are valid UTF-8 ("encoding": "utf-8"), else both base64 ("base64").
json ExecResultToJson(const guest::client::ExecResult& result);
// A per-call run's body (docs/node.md, "Per-call runs"): the exec fields
// and an optional "workspace" (a workspace's name, attached for the call).
// `template_name` comes from the path.
Result<RunOptions> RunOptionsFromJson(const std::string& template_name, const json& body);
// ExecResultToJson plus "timings": {restoreMs, execMs, totalMs}.
json RunResultToJson(const RunResult& result);
json RunTimingsToJson(const RunTimings& timings);
// PUT /v1/workspaces/{name}: {"sizeMiB", "tokenSha256"?, "labels"?, "name"?}.
Result<WorkspaceSpec> WorkspaceSpecFromJson(const json& body, const std::string& name);
// {"name", "sizeMiB", "filesystem", "labels", "state", "message",
// "attachedTo", "bytesUsed", "createdAt"} and "token" when minted.
json ToJson(const WorkspaceInfo& info, bool with_token);
// One NDJSON line of a streamed answer (invalid UTF-8 replaced).
std::string NdjsonLine(const json& j);
// GET .../stats: {"id", "cpuUsageNanos", "memoryBytes", "memoryLimitBytes",
// "pids", "memMib", "vcpus", "source"}.
json StatsToJson(const std::string& id, const SandboxStats& stats);

// Limits the API enforces on its own.
inline constexpr uint32_t kMaxForkCount = 64;
inline constexpr int64_t kMaxTtlSeconds = 366LL * 24 * 3600;
inline constexpr uint64_t kMaxExecTimeoutSeconds = 24 * 3600;

}  // namespace kubicle::noderuntime::api
