// POST /v1/templates/{name}/run: a per-call run (docs/node.md, "Per-call
// runs"), answered as one JSON document or, with ?stream=true, as NDJSON
// lines like the exec route's, the last one {"exit": {..., "timings"}}.
#include "noderuntime/api/codec.h"
#include "noderuntime/server/http_call.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

using guest::protocol::OutputStream;

namespace {

// Unknown or not-Ready templates are plain 404/409 answers, decided before
// a stream starts or a VM is taken.
bool CheckTemplateReady(Call& call, TemplateService& svc) {
  auto t = svc.GetTemplate(call.name());
  if (!t.ok()) {
    call.Fail(t.status());
    return false;
  }
  if (t->state != TemplateState::kReady) {
    call.Error(409, "FailedPrecondition",
               "template \"" + call.name() + "\" is not ready on this node (" +
                   TemplateStateName(t->state) + (t->message.empty() ? "" : ": " + t->message) +
                   "); try a node where it is Ready");
    return false;
  }
  return true;
}

void StreamRun(Call& call, RunService& svc, RunOptions options) {
  call.StartStream(200, "application/x-ndjson");
  options.exec.io.on_output = [&call](OutputStream s, guest::protocol::ByteSpan data) {
    call.Write(NdjsonLine({{"stream", s == OutputStream::kStdout ? "stdout" : "stderr"},
                           {"data", Base64Encode(data)}}));
  };
  auto result = svc.Run(options);
  if (result.ok()) {
    nlohmann::json exit = RunResultToJson(*result);
    for (const char* k : {"stdout", "stderr", "encoding"}) exit.erase(k);
    call.Write(NdjsonLine({{"exit", exit}}));
  } else {
    call.Write(NdjsonLine({{"error",
                            {{"code", std::string(StatusCodeName(result.status().code()))},
                             {"message", result.status().message()}}}}));
  }
  call.EndStream();
}

}  // namespace

void HandleRun(Call& call, RunService& svc, TemplateService& templates,
               const ApiServerOptions& opts) {
  if (!call.OnlyQuery({"stream"})) return;
  if (!ValidId(call.name())) {
    return call.Error(400, "InvalidArgument",
                      "template name \"" + call.name() + "\" must be a DNS-1123 label");
  }
  std::string stream = call.Query("stream").value_or("false");
  if (stream != "true" && stream != "false" && stream != "1" && stream != "0") {
    return call.Error(400, "InvalidArgument", "query parameter \"stream\" must be true or false");
  }
  auto body = call.JsonBody(opts.max_json_bytes);
  if (!body) return;
  auto options = RunOptionsFromJson(call.name(), *body);
  if (!options.ok()) return call.Fail(options.status());
  if (!CheckTemplateReady(call, templates)) return;
  if (stream == "true" || stream == "1") return StreamRun(call, svc, std::move(*options));
  auto result = svc.Run(*options);
  result.ok() ? call.Json(200, RunResultToJson(*result)) : call.Fail(result.status());
}

}  // namespace kubicle::noderuntime::server
