// GET .../console (the guest's serial console log) and GET .../stats (what
// the VM uses now), docs/node.md "Routes".
#include <thread>

#include "noderuntime/api/codec.h"
#include "noderuntime/server/http_call.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

namespace {

// One read of the log: bounded by the VMM's --serial-max-bytes anyway, and
// this keeps a misconfigured node from answering gigabytes in one body.
constexpr size_t kMaxConsoleRead = 8u << 20;
// One NDJSON line of a followed console.
constexpr size_t kFollowChunk = 64u << 10;

bool CheckId(Call& call) {
  if (ValidId(call.name())) return true;
  call.Error(400, "InvalidArgument",
             "sandbox id \"" + call.name() + "\" must be a DNS-1123 label: [a-z0-9-], at most 63");
  return false;
}

std::string Line(const nlohmann::json& j) { return j.dump() + "\n"; }

// The end line of a followed console: why no more will come.
nlohmann::json EndOf(SandboxLifecycle& svc, const std::string& id) {
  auto info = svc.GetSandbox(id);
  if (!info.ok()) return {{"end", {{"state", "Gone"}, {"message", info.status().message()}}}};
  return {{"end", {{"state", SandboxStateName(info->state)}, {"message", info->message}}}};
}

// ?follow=true: NDJSON, one {"offset", "data"} line (base64, at most 64 KiB)
// per piece of output as it appears, an {"offset"} line after each
// heartbeat interval without output, and a last {"end": {"state",
// "message"}} line once the VM stopped and its log has been read to the end.
// `offset` is where the line's data starts in the current log file; it goes
// back to 0 when kubicle-vmm rotated the log.
void FollowConsole(Call& call, GuestIo& svc, SandboxLifecycle& sandboxes,
                   const ApiServerOptions& opts,
                   const std::atomic<bool>& stopping, uint64_t offset) {
  // A missing sandbox is a plain 404 before the stream starts.
  auto first = svc.ReadConsole(call.name(), offset, kFollowChunk);
  if (!first.ok()) return call.Fail(first.status());
  call.StartStream(200, "application/x-ndjson");
  auto last_write = std::chrono::steady_clock::now();
  Result<ConsoleRead> r = std::move(first);
  while (!stopping.load()) {
    if (!r.ok()) {
      call.Write(Line(r.status().code() == StatusCode::kNotFound
                          ? EndOf(sandboxes, call.name())
                          : nlohmann::json{{"error",
                                            {{"code", std::string(StatusCodeName(r.status().code()))},
                                             {"message", r.status().message()}}}}));
      return call.EndStream();
    }
    if (!r->data.empty()) {
      if (!call.Write(Line({{"offset", r->offset}, {"data", Base64Encode(r->data)}}))) return;
      offset = r->offset + r->data.size();
      last_write = std::chrono::steady_clock::now();
      r = svc.ReadConsole(call.name(), offset, kFollowChunk);  // more may be there at once
      continue;
    }
    offset = r->offset;  // a rotation moved it back
    if (!r->running) {
      call.Write(Line(EndOf(sandboxes, call.name())));
      return call.EndStream();
    }
    if (std::chrono::steady_clock::now() - last_write >= opts.console_heartbeat) {
      if (!call.Write(Line({{"offset", offset}}))) return;
      last_write = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(opts.console_poll_interval);
    r = svc.ReadConsole(call.name(), offset, kFollowChunk);
  }
  call.EndStream();  // the node stops: the client may come back from `offset`
}

}  // namespace

void HandleConsole(Call& call, GuestIo& svc, SandboxLifecycle& sandboxes, const ApiServerOptions& opts,
                   const std::atomic<bool>& stopping) {
  if (!call.OnlyQuery({"offset", "follow"}) || !CheckId(call)) return;
  uint64_t offset = 0;
  if (auto o = call.Query("offset")) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = o->empty() ? 0 : std::strtoull(o->c_str(), &end, 10);
    if (o->empty() || *end != '\0' || errno == ERANGE || (*o)[0] == '-') {
      return call.Error(400, "InvalidArgument",
                        "query parameter \"offset\" must be a byte offset (0 or more)");
    }
    offset = v;
  }
  std::string follow = call.Query("follow").value_or("false");
  if (follow != "true" && follow != "false" && follow != "1" && follow != "0") {
    return call.Error(400, "InvalidArgument", "query parameter \"follow\" must be true or false");
  }
  if (follow == "true" || follow == "1") return FollowConsole(call, svc, sandboxes, opts, stopping, offset);
  auto r = svc.ReadConsole(call.name(), offset, kMaxConsoleRead);
  if (!r.ok()) return call.Fail(r.status());
  call.Raw(200, std::vector<unsigned char>(r->data.begin(), r->data.end()),
           "application/octet-stream");
}

void HandleStats(Call& call, GuestIo& svc, const ApiServerOptions&) {
  if (!call.OnlyQuery({}) || !CheckId(call)) return;
  auto s = svc.GetSandboxStats(call.name());
  s.ok() ? call.Json(200, StatsToJson(call.name(), *s)) : call.Fail(s.status());
}

}  // namespace kubicle::noderuntime::server
