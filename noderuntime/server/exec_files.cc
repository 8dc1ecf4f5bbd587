// Exec (collected or streamed as NDJSON) and file routes.
#include "noderuntime/api/codec.h"
#include "noderuntime/server/http_call.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

using guest::protocol::OutputStream;

namespace {

bool CheckId(Call& call) {
  if (ValidId(call.name())) return true;
  call.Error(400, "InvalidArgument",
             "sandbox id \"" + call.name() + "\" must be a DNS-1123 label: [a-z0-9-], at most 63");
  return false;
}

// Each output chunk becomes one NDJSON line written as it is produced. The
// write blocks while the client is behind, which holds the exec's output
// back instead of buffering it here; once the client is gone the rest is
// dropped (the command still runs to its end or its timeout).
void StreamExec(Call& call, GuestIo& svc, SandboxLifecycle& sandboxes, ExecOptions options) {
  // A missing sandbox is a plain 404, not a stream that ends in an error.
  auto info = sandboxes.GetSandbox(call.name());
  if (!info.ok()) return call.Fail(info.status());
  call.StartStream(200, "application/x-ndjson");
  options.io.on_output = [&call](OutputStream s, guest::protocol::ByteSpan data) {
    call.Write(NdjsonLine({{"stream", s == OutputStream::kStdout ? "stdout" : "stderr"},
                     {"data", Base64Encode(data)}}));
  };
  auto result = svc.Exec(call.name(), options);
  if (result.ok()) {
    nlohmann::json exit = ExecResultToJson(*result);
    exit.erase("stdout");
    exit.erase("stderr");
    exit.erase("encoding");
    call.Write(NdjsonLine({{"exit", exit}}));
  } else {
    call.Write(NdjsonLine({{"error",
                      {{"code", std::string(StatusCodeName(result.status().code()))},
                       {"message", result.status().message()}}}}));
  }
  call.EndStream();
}

// GET .../files: the file as it is read from the guest, one chunk at a time
// with the client's backpressure, never whole in memory. An error before the
// first chunk (no such file) is a plain error answer; one after it aborts
// the connection, so the client sees a truncated body rather than a short
// file that looks complete.
void StreamFile(Call& call, const FileOps& ops, const std::string& path) {
  bool started = false;
  Status st = ops.read(path, [&](const guest::client::FileChunk& c) {
    if (!started) {
      call.StartStream(200, "application/octet-stream");
      started = true;
    }
    if (c.data.empty()) return Status::Ok();
    if (!call.Write(std::string(reinterpret_cast<const char*>(c.data.data()), c.data.size()))) {
      return Status::Unavailable("the client went away");
    }
    return Status::Ok();
  });
  if (!started) return call.Fail(st.ok() ? Status::Internal("the read returned no data") : st);
  if (!st.ok()) return call.AbortStream();
  call.EndStream();
}

// The "path" query parameter when it is an absolute path; else 400 replied.
std::optional<std::string> PathQuery(Call& call) {
  std::string path = call.Query("path").value_or("");
  if (path.empty() || path.front() != '/' || path.find('\0') != std::string::npos) {
    call.Error(400, "InvalidArgument", "query parameter \"path\" must be an absolute path");
    return std::nullopt;
  }
  return path;
}

// An optional boolean query parameter (default false); else 400 replied.
std::optional<bool> BoolQuery(Call& call, const char* key) {
  std::string v = call.Query(key).value_or("false");
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  call.Error(400, "InvalidArgument",
             std::string("query parameter \"") + key + "\" must be true or false");
  return std::nullopt;
}

const char* FileTypeName(guest::protocol::FileType t) {
  switch (t) {
    case guest::protocol::FileType::kFile: return "file";
    case guest::protocol::FileType::kDirectory: return "dir";
    case guest::protocol::FileType::kSymlink: return "symlink";
    case guest::protocol::FileType::kOther: return "other";
  }
  return "other";
}

// RFC 3339 of a guest's mtime; null when the guest keeps none (0).
nlohmann::json MtimeJson(uint64_t ns) {
  if (ns == 0) return nullptr;
  return FormatTime(WallTime(std::chrono::duration_cast<WallTime::duration>(
      std::chrono::nanoseconds(ns))));
}

}  // namespace

void HandleExec(Call& call, GuestIo& svc, SandboxLifecycle& sandboxes,
                const ApiServerOptions& opts) {
  if (!call.OnlyQuery({"stream"}) || !CheckId(call)) return;
  std::string stream = call.Query("stream").value_or("false");
  if (stream != "true" && stream != "false" && stream != "1" && stream != "0") {
    return call.Error(400, "InvalidArgument", "query parameter \"stream\" must be true or false");
  }
  auto body = call.JsonBody(opts.max_json_bytes);
  if (!body) return;
  auto options = ExecOptionsFromJson(*body);
  if (!options.ok()) return call.Fail(options.status());
  if (stream == "true" || stream == "1") return StreamExec(call, svc, sandboxes, std::move(*options));
  auto result = svc.Exec(call.name(), *options);
  result.ok() ? call.Json(200, ExecResultToJson(*result)) : call.Fail(result.status());
}

void ServeFiles(Call& call, const FileOps& ops, const ApiServerOptions& opts) {
  const bool put = call.method() == "PUT", del = call.method() == "DELETE";
  if (!(put   ? call.OnlyQuery({"path", "mode"})
        : del ? call.OnlyQuery({"path", "recursive"})
              : call.OnlyQuery({"path"})) ||
      !ops.check_name(call)) {
    return;
  }
  auto path = PathQuery(call);
  if (!path) return;
  if (del) {
    auto recursive = BoolQuery(call, "recursive");
    if (!recursive) return;
    Status st = ops.remove(*path, *recursive);
    return st.ok() ? call.Json(200, {{"removed", *path}}) : call.Fail(st);
  }
  if (!put) return StreamFile(call, ops, *path);
  uint32_t mode = 0644;
  if (auto m = call.Query("mode")) {
    char* end = nullptr;
    unsigned long v = m->empty() ? 0 : std::strtoul(m->c_str(), &end, 8);
    if (m->empty() || *end != '\0' || v > 07777 || m->size() > 5) {
      return call.Error(400, "InvalidArgument",
                        "query parameter \"mode\" must be octal, at most 07777 (e.g. 0644)");
    }
    mode = static_cast<uint32_t>(v);
  }
  auto body = call.Body(opts.max_file_bytes);
  if (!body) return;
  const auto* p = reinterpret_cast<const uint8_t*>(body->data());
  Status st = ops.write(*path, {p, body->size()}, mode);
  if (!st.ok()) return call.Fail(st);
  call.Json(200, {{"path", *path}, {"size", body->size()}, {"mode", mode}});
}

void ServeStat(Call& call, const FileOps& ops) {
  if (!call.OnlyQuery({"path"}) || !ops.check_name(call)) return;
  auto path = PathQuery(call);
  if (!path) return;
  auto st = ops.stat(*path);
  if (!st.ok()) return call.Fail(st.status());
  call.Json(200, {{"path", *path},
                  {"type", FileTypeName(st->type)},
                  {"size", st->size},
                  {"mode", st->mode},
                  {"mtime", MtimeJson(st->mtime_ns)},
                  {"uid", st->uid},
                  {"gid", st->gid}});
}

void ServeList(Call& call, const FileOps& ops) {
  if (!call.OnlyQuery({"path"}) || !ops.check_name(call)) return;
  auto path = PathQuery(call);
  if (!path) return;
  auto entries = ops.list(*path);
  if (!entries.ok()) return call.Fail(entries.status());
  const std::string dir = path->back() == '/' ? *path : *path + "/";
  nlohmann::json items = nlohmann::json::array();
  for (const auto& e : *entries) {
    items.push_back({{"name", e.name},
                     {"path", dir + e.name},
                     {"type", FileTypeName(e.type)},
                     {"size", e.size},
                     {"mode", e.mode},
                     {"mtime", MtimeJson(e.mtime_ns)}});
  }
  call.Json(200, {{"path", *path}, {"items", items}});
}

static FileOps SandboxFileOps(GuestIo& svc, const std::string& id) {
  return {.check_name = CheckId,
          .read = [&svc, id](const std::string& p, const guest::client::FileChunkFn& f) {
            return svc.ReadFileStream(id, p, f);
          },
          .write = [&svc, id](const std::string& p, guest::protocol::ByteSpan d, uint32_t m) {
            return svc.WriteFile(id, p, d, m);
          },
          .stat = [&svc, id](const std::string& p) { return svc.StatFile(id, p); },
          .list = [&svc, id](const std::string& p) { return svc.ListFiles(id, p); },
          .remove = [&svc, id](const std::string& p, bool r) { return svc.RemoveFile(id, p, r); }};
}

void HandleFiles(Call& call, GuestIo& svc, const ApiServerOptions& opts) {
  ServeFiles(call, SandboxFileOps(svc, call.name()), opts);
}
void HandleStat(Call& call, GuestIo& svc, const ApiServerOptions&) {
  ServeStat(call, SandboxFileOps(svc, call.name()));
}
void HandleList(Call& call, GuestIo& svc, const ApiServerOptions&) {
  ServeList(call, SandboxFileOps(svc, call.name()));
}

}  // namespace kubicle::noderuntime::server
