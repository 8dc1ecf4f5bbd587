// The data-plane verbs: exec, cp, logs, top. Each reaches the Sandbox's VM
// through its node (sandbox_access.h).
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "kube/api/types.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/api/codec.h"
#include "plugin/sandbox_access.h"
#include "plugin/verbs.h"

namespace kubicle::plugin {

using kube::Json;
using kube::StrAt;
using noderuntime::client::NodeClient;

namespace {

// The exec body cap is 1 MiB of JSON, base64 grows stdin by 4/3.
constexpr size_t kMaxStdin = 512u << 10;

int Usage(Env& env, const std::string& verb, const std::string& why) {
  *env.err << "kubectl-kubicle " << verb << ": " << why << "\nSee 'kubectl kubicle " << verb
           << " --help'.\n";
  return kExitUsage;
}

int Fail(Env& env, const std::string& verb, const Status& st, int code = kExitFailed) {
  *env.err << "kubectl-kubicle " << verb << ": " << st.message() << "\n";
  return code;
}

struct Connected {
  DataPlane dp;
  std::unique_ptr<NodeClient> client;
};

Result<Connected> Open(Env& env, const std::string& name, bool workspace = false) {
  Connected c;
  if (workspace) {
    ASSIGN_OR_RETURN(c.dp, ResolveWorkspaceDataPlane(*env.kube, env.ns, name, env.lease_ns));
  } else {
    ASSIGN_OR_RETURN(c.dp, ResolveDataPlane(*env.kube, env.ns, name, env.lease_ns));
  }
  ASSIGN_OR_RETURN(c.client, Connect(c.dp));
  return c;
}

}  // namespace

int RunExec(const Invocation& inv, Env& env) {
  if (!inv.dash_dash || inv.command.empty()) {
    return Usage(env, "exec", "give the command after --: exec SBX -- CMD [ARG...]");
  }
  if (inv.positional.size() != 1) return Usage(env, "exec", "give one Sandbox name before --");
  if (inv.Bool("tty")) return Usage(env, "exec", "there is no TTY (-t); use -i for stdin");
  std::chrono::milliseconds timeout{60000};
  if (inv.Has("timeout")) {
    auto t = ParseDuration(inv.Get("timeout"));
    if (!t.ok()) return Usage(env, "exec", t.status().message());
    timeout = *t;
  }
  Json req{{"argv", inv.command},
           {"timeoutSeconds", (timeout.count() + 999) / 1000}};
  if (!inv.All("env").empty()) {
    for (const std::string& kv : inv.All("env")) {
      if (kv.find('=') == std::string::npos || kv[0] == '=') {
        return Usage(env, "exec", "--env " + kv + " is not K=V");
      }
    }
    req["env"] = inv.All("env");
  }
  if (inv.Has("cwd")) req["cwd"] = inv.Get("cwd");
  if (inv.Bool("stdin")) {
    std::string data((std::istreambuf_iterator<char>(*env.in)), std::istreambuf_iterator<char>());
    if (data.size() > kMaxStdin) {
      return Fail(env, "exec",
                  Status::InvalidArgument("stdin is " + std::to_string(data.size()) +
                                          " bytes; -i takes at most 512 KiB (use cp for files)"),
                  kExecFailed);
    }
    const auto* p = reinterpret_cast<const uint8_t*>(data.data());
    req["stdinBase64"] = noderuntime::api::Base64Encode({p, data.size()});
  }
  auto c = Open(env, inv.positional[0]);
  if (!c.ok()) return Fail(env, "exec", c.status(), kExecFailed);
  auto exit = c->client->ExecStream(c->dp.vm_id, req,
                                    [&](const std::string& stream, const std::string& data) {
                                      std::ostream& o = stream == "stderr" ? *env.err : *env.out;
                                      o.write(data.data(), static_cast<std::streamsize>(data.size()));
                                      o.flush();
                                    });
  if (!exit.ok()) return Fail(env, "exec", exit.status(), kExecFailed);
  if (exit->value("timedOut", false)) {
    *env.err << "kubectl-kubicle exec: the command timed out after " << timeout.count() / 1000
             << "s\n";
    return 124;
  }
  if (exit->contains("exitCode") && (*exit)["exitCode"].is_number_integer()) {
    int code = (*exit)["exitCode"].get<int>();
    return code >= 0 && code <= 255 ? code : kExitFailed;
  }
  if (exit->contains("signal") && (*exit)["signal"].is_number_integer()) {
    return 128 + ((*exit)["signal"].get<int>() & 127);
  }
  return Fail(env, "exec", Status::DataLoss("the node's answer has no exit code: " + exit->dump()),
              kExecFailed);
}

int RunCp(const Invocation& inv, Env& env) {
  if (inv.positional.size() != 2) return Usage(env, "cp", "give a source and a destination");
  CpOperand src = ParseCpOperand(inv.positional[0]), dst = ParseCpOperand(inv.positional[1]);
  if (src.sandbox.empty() == dst.sandbox.empty()) {
    return Usage(env, "cp", "exactly one of the two must be SBX:/path or ws/WS:/path");
  }
  const CpOperand& remote = src.sandbox.empty() ? dst : src;
  if (remote.path.empty() || remote.path[0] != '/') {
    return Usage(env, "cp", "the path in the Sandbox must be absolute: " + remote.sandbox + ":/path");
  }
  auto c = Open(env, remote.sandbox, remote.workspace);
  if (!c.ok()) return Fail(env, "cp", c.status());
  if (!dst.sandbox.empty()) {  // upload
    std::string data;
    uint32_t mode = 0644;
    if (src.path == "-") {
      data.assign(std::istreambuf_iterator<char>(*env.in), std::istreambuf_iterator<char>());
    } else {
      struct stat st {};
      if (::stat(src.path.c_str(), &st) != 0) {
        return Fail(env, "cp", Status::FromErrno("stat " + src.path));
      }
      if (S_ISDIR(st.st_mode)) {
        return Fail(env, "cp", Status::InvalidArgument(src.path + " is a directory; cp copies one file"));
      }
      mode = st.st_mode & 07777;
      std::ifstream f(src.path, std::ios::binary);
      if (!f) return Fail(env, "cp", Status::FromErrno("open " + src.path));
      data.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    Status st = c->client->PutFile(c->dp.vm_id, dst.path, data, mode, c->dp.files_owner);
    return st.ok() ? 0 : Fail(env, "cp", st);
  }
  auto data = c->client->GetFile(c->dp.vm_id, src.path, c->dp.files_owner);
  if (!data.ok()) return Fail(env, "cp", data.status());
  if (dst.path == "-") {
    env.out->write(data->data(), static_cast<std::streamsize>(data->size()));
    env.out->flush();
    return 0;
  }
  std::string target = dst.path;
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    target += "/" + src.path.substr(src.path.rfind('/') + 1);
  }
  std::ofstream f(target, std::ios::binary | std::ios::trunc);
  if (!f) return Fail(env, "cp", Status::FromErrno("open " + target));
  f.write(data->data(), static_cast<std::streamsize>(data->size()));
  f.close();
  if (!f) return Fail(env, "cp", Status::FromErrno("write " + target));
  return 0;
}

int RunLogs(const Invocation& inv, Env& env) {
  if (inv.positional.size() != 1) return Usage(env, "logs", "give one Sandbox name");
  auto c = Open(env, inv.positional[0]);
  if (!c.ok()) return Fail(env, "logs", c.status());
  if (!inv.Bool("follow")) {
    auto text = c->client->GetRaw(c->dp.Path("/console"));
    if (!text.ok()) return Fail(env, "logs", text.status());
    env.out->write(text->data(), static_cast<std::streamsize>(text->size()));
    env.out->flush();
    return 0;
  }
  // Followed: NDJSON from the node; a stream that ends without its "end"
  // line (the node restarting) is taken up again from the offset reached.
  uint64_t offset = 0;
  for (int attempt = 0; attempt < 30; ++attempt) {
    std::optional<int> done;
    Status st = c->client->GetLines(
        c->dp.Path("/console?follow=true&offset=" + std::to_string(offset)), [&](const Json& line) {
          if (line.contains("data")) {
            auto bytes = noderuntime::api::Base64Decode(StrAt(line, {"data"}));
            if (!bytes.ok()) {
              done = Fail(env, "logs", Status::DataLoss("bad base64 from the node"));
              return false;
            }
            env.out->write(reinterpret_cast<const char*>(bytes->data()),
                           static_cast<std::streamsize>(bytes->size()));
            env.out->flush();
            offset = static_cast<uint64_t>(kube::IntAt(line, {"offset"})) + bytes->size();
            attempt = 0;
          } else if (line.contains("end")) {
            const std::string state = StrAt(line, {"end", "state"});
            const std::string msg = StrAt(line, {"end", "message"});
            *env.err << "kubectl-kubicle logs: the VM is no longer running (" << state
                     << (msg.empty() ? "" : ": " + msg) << ")\n";
            done = 0;
            return false;
          } else if (line.contains("error")) {
            done = Fail(env, "logs", Status::Internal(StrAt(line, {"error", "message"})));
            return false;
          } else if (line.contains("offset")) {
            offset = static_cast<uint64_t>(kube::IntAt(line, {"offset"}));
          }
          return true;
        });
    if (done) return *done;
    if (!st.ok() && st.code() != StatusCode::kUnavailable) return Fail(env, "logs", st);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    // The node may have moved (a restart publishes a new CA, an endpoint).
    auto again = Open(env, inv.positional[0]);
    if (!again.ok()) return Fail(env, "logs", again.status());
    c = std::move(again);
  }
  return Fail(env, "logs", Status::Unavailable("the node's console stream keeps failing"));
}

std::string FormatMillicores(uint64_t before, uint64_t after, std::chrono::nanoseconds elapsed) {
  if (elapsed.count() <= 0 || after < before) return "0m";
  const double cores = static_cast<double>(after - before) / static_cast<double>(elapsed.count());
  return std::to_string(static_cast<uint64_t>(cores * 1000 + 0.5)) + "m";
}

std::string FormatMebibytes(uint64_t bytes) {
  return std::to_string((bytes + (1u << 19)) >> 20) + "Mi";
}

int RunTop(const Invocation& inv, Env& env) {
  std::chrono::milliseconds interval{1000};
  if (inv.Has("interval")) {
    auto t = ParseDuration(inv.Get("interval"));
    if (!t.ok()) return Usage(env, "top", t.status().message());
    interval = *t;
  }
  std::vector<std::string> names = inv.positional;
  if (names.empty()) {
    kube::ListOptions lo;
    lo.label_selector = inv.Get("selector");
    auto list = env.kube->List(kube::SandboxResource(), env.ns, lo);
    if (!list.ok()) return Fail(env, "top", list.status());
    const Json& items = kube::At(*list, {"items"});
    if (items.is_array()) {
      for (const Json& s : items) {
        if (kube::api::ParseSandboxStatus(s).phase == "Running")
          names.push_back(kube::api::ParseObjectMeta(s).name);
      }
    }
    std::sort(names.begin(), names.end());
  }
  if (names.empty()) {
    *env.err << "No running Sandboxes in namespace " << env.ns << ".\n";
    return 0;
  }
  struct Row {
    std::string name;
    Connected c;
    Json first, second;
    std::chrono::steady_clock::time_point t0, t1;
    bool ok = false;
  };
  std::vector<Row> rows;
  int failures = 0;
  for (const std::string& n : names) {
    auto c = Open(env, n);
    if (!c.ok()) {
      *env.err << "kubectl-kubicle top: " << n << ": " << c.status().message() << "\n";
      ++failures;
      continue;
    }
    rows.push_back(Row{n, std::move(*c), {}, {}, {}, {}, false});
  }
  auto sample = [&](bool first) {
    for (Row& r : rows) {
      if (!first && !r.ok) continue;
      auto s = r.c.client->Call("GET", r.c.dp.Path("/stats"));
      (first ? r.t0 : r.t1) = std::chrono::steady_clock::now();
      if (!s.ok()) {
        *env.err << "kubectl-kubicle top: " << r.name << ": " << s.status().message() << "\n";
        ++failures;
        r.ok = false;
        continue;
      }
      (first ? r.first : r.second) = *s;
      r.ok = true;
    }
  };
  sample(true);
  std::this_thread::sleep_for(interval);
  sample(false);
  char line[512];
  std::snprintf(line, sizeof line, "%-40s %-16s %-10s %-8s %-8s %-6s %s\n", "NAME", "NODE",
                "CPU(cores)", "MEMORY", "LIMIT", "VCPUS", "GUEST-MEM");
  *env.out << line;
  for (const Row& r : rows) {
    if (!r.ok) continue;
    auto u = [&](const Json& j, const char* k) { return static_cast<uint64_t>(kube::IntAt(j, {k})); };
    const uint64_t limit = u(r.second, "memoryLimitBytes");
    std::snprintf(line, sizeof line, "%-40s %-16s %-10s %-8s %-8s %-6llu %lluMi\n", r.name.c_str(),
                  r.c.dp.node.c_str(),
                  FormatMillicores(u(r.first, "cpuUsageNanos"), u(r.second, "cpuUsageNanos"),
                                   r.t1 - r.t0).c_str(),
                  FormatMebibytes(u(r.second, "memoryBytes")).c_str(),
                  limit == 0 ? "-" : FormatMebibytes(limit).c_str(),
                  static_cast<unsigned long long>(u(r.second, "vcpus")),
                  static_cast<unsigned long long>(u(r.second, "memMib")));
    *env.out << line;
  }
  return failures == 0 ? 0 : kExitFailed;
}

}  // namespace kubicle::plugin
