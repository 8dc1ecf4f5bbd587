// kubicle-nodectl swarm: the README's main job against one node. Fans out N
// sandboxes tagged with one run id, runs a command in each, prints a table
// of results and latencies, then sweeps the run with one label-selector
// delete and checks that nothing of it remains.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "noderuntime/cli/args.h"
#include "noderuntime/cli/commands.h"

namespace kubicle::noderuntime::cli {

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

std::string RunId() {
  std::random_device rd;
  char b[16];
  std::snprintf(b, sizeof b, "swarm-%06x", rd() & 0xffffff);
  return b;
}

struct Member {
  std::string id;
  Status status;
  double create_ms = 0;
  double exec_ms = 0;
  int exit_code = -1;
  std::string output;
};

// First line of the output, shortened for the table.
std::string Summary(const json& r) {
  std::string out = r.value("stdout", "");
  if (r.value("encoding", "utf-8") == "base64") return "<binary>";
  if (out.empty()) out = r.value("stderr", "");
  out = out.substr(0, out.find('\n'));
  return out.size() > 48 ? out.substr(0, 45) + "..." : out;
}

void RunMember(NodeClient& c, const json& spec, const json& exec, Member* m) {
  auto t0 = Clock::now();
  auto created = c.Call("POST", "/v1/sandboxes", spec);
  m->create_ms = MsSince(t0);
  if (!created.ok()) {
    m->status = created.status();
    return;
  }
  m->id = (*created)["id"];
  auto t1 = Clock::now();
  auto r = c.Call("POST", "/v1/sandboxes/" + m->id + "/exec", exec);
  m->exec_ms = MsSince(t1);
  if (!r.ok()) {
    m->status = r.status();
    return;
  }
  m->exit_code = (*r)["exitCode"].is_number_integer() ? (*r)["exitCode"].get<int>() : -1;
  m->output = Summary(*r);
}

// Prints the table and the p50s; returns how many members failed.
int PrintResults(const std::vector<Member>& members, double wall) {
  std::vector<std::vector<std::string>> rows{{"SANDBOX", "CREATE_MS", "EXEC_MS", "EXIT", "OUTPUT"}};
  std::vector<double> creates, execs;
  int failed = 0;
  char b1[32], b2[32];
  for (const auto& m : members) {
    std::snprintf(b1, sizeof b1, "%.1f", m.create_ms);
    std::snprintf(b2, sizeof b2, "%.1f", m.exec_ms);
    if (!m.status.ok()) {
      ++failed;
      rows.push_back({m.id.empty() ? "-" : m.id, b1, m.id.empty() ? "-" : b2, "error",
                      m.status.message().substr(0, 60)});
      continue;
    }
    creates.push_back(m.create_ms);
    execs.push_back(m.exec_ms);
    if (m.exit_code != 0) ++failed;
    rows.push_back({m.id, b1, b2, std::to_string(m.exit_code), m.output});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  std::printf("create p50 %.1f ms, exec p50 %.1f ms, wall %.1f ms for %zu sandboxes (%d failed)\n",
              Median(creates), Median(execs), wall, members.size(), failed);
  return failed;
}

}  // namespace

int CmdSwarm(NodeClient& c, const Argv& args) {
  auto a = ParseArgs(args, {"--template", "-t", "--count", "--run", "--ttl", "--shell"}, {"--keep"});
  std::string tmpl = a.ok() ? a->Get("--template", a->Get("-t")) : "";
  if (!a.ok() || tmpl.empty() || !a->positional.empty()) {
    std::fprintf(stderr, "usage: kubicle-nodectl swarm --template T [--count 20] [--run ID] "
                         "[--ttl S] [--keep] [--shell CMD | -- ARGV...]\n");
    return kExitUsage;
  }
  auto count = a->Int("--count", 20, 1, 1000);
  auto ttl = a->Int("--ttl", 600, 1, 86400);
  if (!count.ok() || !ttl.ok()) return Fail("swarm", count.ok() ? ttl.status() : count.status());
  const std::string run = a->Get("--run", RunId());
  json spec = {{"template", tmpl}, {"labels", {{"kubicle.dev/run", run}}}, {"ttlSeconds", *ttl}};
  json exec = json::object();
  if (a->Has("--shell")) exec["shell"] = a->Get("--shell");
  else exec["argv"] = a->rest.empty() ? std::vector<std::string>{"hostname"} : a->rest;

  std::printf("run %s: %lld sandboxes of template %s, command %s\n", run.c_str(), *count,
              tmpl.c_str(), (exec.contains("shell") ? exec["shell"] : exec["argv"]).dump().c_str());
  std::vector<Member> members(*count);
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (auto& m : members) threads.emplace_back([&, mp = &m] { RunMember(c, spec, exec, mp); });
  for (auto& t : threads) t.join();
  double wall = MsSince(start);

  const int failed = PrintResults(members, wall);
  if (a->Has("--keep")) {
    std::printf("kept; sweep later with: kubicle-nodectl rm -l kubicle.dev/run=%s\n", run.c_str());
    return failed ? kExitFailed : kExitOk;
  }
  const std::string sel = "kubicle.dev/run=" + run;
  auto t0 = Clock::now();
  auto swept = c.Call("DELETE", "/v1/sandboxes?labelSelector=" + QueryEscape(sel, kQueryKeep));
  if (!swept.ok()) return Fail("sweep " + sel, swept.status());
  double sweep_ms = MsSince(t0);
  auto left = c.Call("GET", "/v1/sandboxes?labelSelector=" + QueryEscape(sel, kQueryKeep));
  if (!left.ok()) return Fail("list " + sel, left.status());
  size_t remaining = (*left)["items"].size();
  std::printf("swept %zu sandboxes with -l %s in %.1f ms; %zu remain\n", (*swept)["deleted"].size(),
              sel.c_str(), sweep_ms, remaining);
  return failed || remaining ? kExitFailed : kExitOk;
}

}  // namespace kubicle::noderuntime::cli
