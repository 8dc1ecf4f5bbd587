#include "noderuntime/cli/commands.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "noderuntime/api/codec.h"
#include "noderuntime/cli/args.h"

namespace kubicle::noderuntime::cli {

namespace {

using Clock = std::chrono::steady_clock;

int Usage(const std::string& msg) {
  std::fprintf(stderr, "kubicle-nodectl: %s (see kubicle-nodectl --help)\n", msg.c_str());
  return kExitUsage;
}

std::string LabelsText(const json& labels) {
  std::string s;
  if (!labels.is_object()) return s;
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (!s.empty()) s += ",";
    s += it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump());
  }
  return s.empty() ? "-" : s;
}

std::string Num(double v, int decimals = 1) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

int TemplatePut(NodeClient& c, const Args& a) {
  if (a.positional.size() != 2) return Usage("template put NAME --kernel PATH [...]");
  const std::string& name = a.positional[1];
  json spec = {{"kernel", a.Get("--kernel")}};
  if (a.Has("--initrd")) spec["initrd"] = a.Get("--initrd");
  if (a.Has("--cmdline")) spec["cmdline"] = a.Get("--cmdline");
  if (a.Has("--disk")) spec["disks"] = a.All("--disk");
  if (a.Has("--warmup")) spec["warmup"] = a.All("--warmup");
  auto mem = a.Int("--mem", 0, 16, 1 << 20);
  auto vcpus = a.Int("--vcpus", 0, 1, 64);
  if (!mem.ok()) return Usage(mem.status().message());
  if (!vcpus.ok()) return Usage(vcpus.status().message());
  if (*mem) spec["memMib"] = *mem;
  if (*vcpus) spec["vcpus"] = *vcpus;
  auto r = c.Call("PUT", "/v1/templates/" + name, spec);
  if (!r.ok()) return Fail("template put " + name, r.status());
  std::printf("template %s: %s\n", name.c_str(), (*r)["state"].get<std::string>().c_str());
  if (!a.Has("--wait")) return kExitOk;
  std::string last = (*r).value("message", "");
  auto start = Clock::now();
  while (true) {
    auto t = c.Call("GET", "/v1/templates/" + name);
    if (!t.ok()) return Fail("template get " + name, t.status());
    std::string state = (*t)["state"], msg = (*t).value("message", "");
    if (msg != last && !msg.empty()) std::fprintf(stderr, "  %s\n", msg.c_str());
    last = msg;
    if (state == "Ready") {
      std::printf("template %s: Ready in %.1f s (%s)\n", name.c_str(),
                  std::chrono::duration<double>(Clock::now() - start).count(),
                  (*t).value("digest", "").c_str());
      return kExitOk;
    }
    if (state == "Failed") {
      std::fprintf(stderr, "template %s failed: %s\n", name.c_str(), msg.c_str());
      return kExitFailed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

int Fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "kubicle-nodectl: %s: %s\n", what.c_str(), st.message().c_str());
  return kExitFailed;
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

int CmdTemplate(NodeClient& c, const Argv& args) {
  auto a = ParseArgs(args, {"--kernel", "--initrd", "--cmdline", "--disk", "--mem", "--vcpus",
                            "--warmup"},
                     {"--wait"});
  if (!a.ok()) return Usage(a.status().message());
  std::string sub = a->positional.empty() ? "" : a->positional[0];
  if (sub == "put") return TemplatePut(c, *a);
  if (sub == "ls") {
    auto r = c.Call("GET", "/v1/templates");
    if (!r.ok()) return Fail("template ls", r.status());
    std::vector<std::vector<std::string>> rows{{"NAME", "STATE", "MEM", "VCPUS", "BAKE_S", "MESSAGE"}};
    for (const auto& t : (*r)["items"]) {
      rows.push_back({t["name"], t["state"], std::to_string(t["spec"]["memMib"].get<int>()),
                      std::to_string(t["spec"]["vcpus"].get<int>()),
                      Num(t.value("bakeSeconds", 0.0)), t.value("message", "")});
    }
    std::fputs(FormatTable(rows).c_str(), stdout);
    return kExitOk;
  }
  if ((sub == "rm" || sub == "get") && a->positional.size() == 2) {
    const std::string path = "/v1/templates/" + a->positional[1];
    auto r = c.Call(sub == "rm" ? "DELETE" : "GET", path);
    if (!r.ok()) return Fail("template " + sub, r.status());
    std::printf("%s\n", sub == "rm" ? ("deleted " + a->positional[1]).c_str() : r->dump(2).c_str());
    return kExitOk;
  }
  return Usage("template put|ls|get|rm");
}

int CmdCreate(NodeClient& c, const Argv& args) {
  auto a = ParseArgs(args, {"--template", "-t", "-l", "--label", "--ttl", "--count", "--id"}, {});
  if (!a.ok()) return Usage(a.status().message());
  std::string tmpl = a->Get("--template", a->Get("-t"));
  if (tmpl.empty() || !a->positional.empty()) return Usage("create --template T [-l k=v]... [--ttl S] [--count N]");
  auto count = a->Int("--count", 1, 1, 1000);
  auto ttl = a->Int("--ttl", 0, 1, 366LL * 86400);
  if (!count.ok()) return Usage(count.status().message());
  if (!ttl.ok()) return Usage(ttl.status().message());
  std::vector<std::string> kvs = a->All("-l");
  for (const auto& l : a->All("--label")) kvs.push_back(l);
  auto labels = ParseLabelArgs(kvs);
  if (!labels.ok()) return Usage(labels.status().message());
  json spec = {{"template", tmpl}, {"labels", *labels}};
  if (*ttl) spec["ttlSeconds"] = *ttl;
  if (a->Has("--id")) {
    if (*count != 1) return Usage("--id needs --count 1");
    spec["id"] = a->Get("--id");
  }
  std::vector<Result<json>> results(*count, Status::Internal("not run"));
  std::vector<double> ms(*count);
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (long long i = 0; i < *count; ++i) {
    threads.emplace_back([&, i] {
      auto t0 = Clock::now();
      results[i] = c.Call("POST", "/v1/sandboxes", spec);
      ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  double wall = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  std::vector<std::vector<std::string>> rows{{"ID", "STATE", "READY_MS", "API_MS", "TOKEN"}};
  int failed = 0;
  for (long long i = 0; i < *count; ++i) {
    if (!results[i].ok()) {
      ++failed;
      std::fprintf(stderr, "kubicle-nodectl: create: %s\n", results[i].status().message().c_str());
      continue;
    }
    const json& s = *results[i];
    rows.push_back({s["id"], s["state"], Num(s.value("readyMs", 0.0)), Num(ms[i]), s.value("token", "")});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  if (*count > 1) std::printf("%lld created, %d failed, wall %.1f ms\n", *count - failed, failed, wall);
  return failed ? kExitFailed : kExitOk;
}

int CmdList(NodeClient& c, const Argv& args) {
  auto a = ParseArgs(args, {"-l", "--selector"}, {});
  if (!a.ok() || !a->positional.empty()) return Usage(a.ok() ? "ls [-l selector]" : a.status().message());
  std::string sel = a->Get("-l", a->Get("--selector"));
  const std::string query = sel.empty() ? "" : "?labelSelector=" + QueryEscape(sel, kQueryKeep);
  auto r = c.Call("GET", "/v1/sandboxes" + query);
  if (!r.ok()) return Fail("ls", r.status());
  std::vector<std::vector<std::string>> rows{{"ID", "TEMPLATE", "STATE", "CREATED", "READY_MS", "PID", "LABELS"}};
  for (const auto& s : (*r)["items"]) {
    rows.push_back({s["id"], s["template"], s["state"], s.value("createdAt", ""),
                    Num(s.value("readyMs", 0.0)), std::to_string(s.value("vmmPid", 0)),
                    LabelsText(s["labels"])});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  return kExitOk;
}

int CmdGet(NodeClient& c, const Argv& args) {
  if (args.size() != 1) return Usage("get ID");
  auto r = c.Call("GET", "/v1/sandboxes/" + args[0]);
  if (!r.ok()) return Fail("get", r.status());
  std::printf("%s\n", r->dump(2).c_str());
  return kExitOk;
}

int CmdExec(NodeClient& c, const Argv& args) {
  auto a = ParseArgs(args, {"--timeout", "--env", "-e", "--cwd", "--shell"}, {"-i", "--stdin"});
  if (!a.ok()) {
    Usage(a.status().message());
    return kExitExecError;
  }
  if (a->positional.size() != 1 || (a->rest.empty() == !a->Has("--shell"))) {
    Usage("exec ID [-i] [--timeout S] [-e K=V]... [--cwd DIR] (-- ARGV... | --shell CMD)");
    return kExitExecError;
  }
  json req = json::object();
  if (a->Has("--shell")) req["shell"] = a->Get("--shell");
  else req["argv"] = a->rest;
  std::vector<std::string> env = a->All("--env");
  for (const auto& e : a->All("-e")) env.push_back(e);
  if (!env.empty()) req["env"] = env;
  if (a->Has("--cwd")) req["cwd"] = a->Get("--cwd");
  if (a->Has("-i") || a->Has("--stdin")) {
    // The whole of our stdin, sent inline with the request (JSON bodies are
    // limited to 1 MiB; put-file moves bigger data).
    std::string in((std::istreambuf_iterator<char>(std::cin)), {});
    req["stdinBase64"] = api::Base64Encode(
        {reinterpret_cast<const uint8_t*>(in.data()), in.size()});
  }
  auto timeout = a->Int("--timeout", 0, 1, 86400);
  if (!timeout.ok()) {
    Usage(timeout.status().message());
    return kExitExecError;
  }
  if (*timeout) req["timeoutSeconds"] = *timeout;
  auto r = c.ExecStream(a->positional[0], req, [](const std::string& stream, const std::string& d) {
    FILE* f = stream == "stderr" ? stderr : stdout;
    std::fwrite(d.data(), 1, d.size(), f);
    std::fflush(f);
  });
  if (!r.ok()) {
    Fail("exec", r.status());
    return kExitExecError;
  }
  if (r->value("timedOut", false)) return 124;
  if ((*r)["exitCode"].is_number_integer()) return (*r)["exitCode"].get<int>() & 0xff;
  if ((*r)["signal"].is_number_integer()) return 128 + (*r)["signal"].get<int>();
  return kExitExecError;
}

int CmdPutFile(NodeClient& c, const Argv& args) {
  auto a = ParseArgs(args, {"--mode"}, {});
  if (!a.ok() || a->positional.size() != 3) return Usage("put-file ID LOCAL REMOTE [--mode 0644]");
  const auto& p = a->positional;
  std::string data;
  if (p[1] == "-") {
    data.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(p[1], std::ios::binary);
    if (!in) return Fail("put-file", Status::NotFound("cannot read " + p[1]));
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint32_t mode = static_cast<uint32_t>(std::strtoul(a->Get("--mode", "0644").c_str(), nullptr, 8));
  Status st = c.PutFile(p[0], p[2], data, mode);
  if (!st.ok()) return Fail("put-file", st);
  std::fprintf(stderr, "%zu bytes -> %s:%s\n", data.size(), p[0].c_str(), p[2].c_str());
  return kExitOk;
}

int CmdGetFile(NodeClient& c, const Argv& args) {
  if (args.size() != 3) return Usage("get-file ID REMOTE LOCAL ('-' for stdout)");
  auto r = c.GetFile(args[0], args[1]);
  if (!r.ok()) return Fail("get-file", r.status());
  if (args[2] == "-") {
    std::fwrite(r->data(), 1, r->size(), stdout);
    return kExitOk;
  }
  std::ofstream out(args[2], std::ios::binary | std::ios::trunc);
  out.write(r->data(), static_cast<std::streamsize>(r->size()));
  if (!out.flush()) return Fail("get-file", Status::Internal("cannot write " + args[2]));
  return kExitOk;
}

int CmdFork(NodeClient& c, const Argv& args) {
  auto a = ParseArgs(args, {"--count", "-l", "--ttl"}, {});
  if (!a.ok() || a->positional.size() != 1) return Usage("fork ID [--count N] [-l k=v]... [--ttl S]");
  auto count = a->Int("--count", 1, 1, 64);
  auto ttl = a->Int("--ttl", 0, 1, 366LL * 86400);
  auto labels = ParseLabelArgs(a->All("-l"));
  if (!count.ok() || !ttl.ok() || !labels.ok()) return Usage("bad --count, --ttl or -l");
  json body = {{"count", *count}, {"labels", *labels}};
  if (*ttl) body["ttlSeconds"] = *ttl;
  auto r = c.Call("POST", "/v1/sandboxes/" + a->positional[0] + "/fork", body);
  if (!r.ok()) return Fail("fork", r.status());
  std::vector<std::vector<std::string>> rows{{"ID", "STATE", "READY_MS", "TOKEN"}};
  for (const auto& s : (*r)["items"]) {
    rows.push_back({s["id"], s["state"], Num(s.value("readyMs", 0.0)), s.value("token", "")});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  return kExitOk;
}

int CmdRemove(NodeClient& c, const Argv& args) {
  auto a = ParseArgs(args, {"-l", "--selector"}, {});
  if (!a.ok()) return Usage(a.status().message());
  std::string sel = a->Get("-l", a->Get("--selector"));
  if (sel.empty() == a->positional.empty()) return Usage("rm ID... | rm -l SELECTOR");
  if (!sel.empty()) {
    auto r = c.Call("DELETE", "/v1/sandboxes?labelSelector=" + QueryEscape(sel, kQueryKeep));
    if (!r.ok()) return Fail("rm -l " + sel, r.status());
    std::printf("deleted %zu sandboxes\n", (*r)["deleted"].size());
    return kExitOk;
  }
  int rc = kExitOk;
  for (const auto& id : a->positional) {
    auto r = c.Call("DELETE", "/v1/sandboxes/" + id);
    if (!r.ok()) rc = Fail("rm " + id, r.status());
    else std::printf("deleted %s\n", id.c_str());
  }
  return rc;
}

}  // namespace kubicle::noderuntime::cli
