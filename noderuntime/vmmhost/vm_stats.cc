#include "noderuntime/vmmhost/vm_stats.h"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <vector>

#include "common/file_io.h"

namespace kubicle::noderuntime {
namespace {

std::optional<uint64_t> ToU64(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// The value after `key` at the start of a line ("key value").
std::optional<std::string_view> Field(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == '\t' || line[key.size()] == ':')) {
      std::string_view v = line.substr(key.size() + 1);
      return v;
    }
    pos = end + 1;
  }
  return std::nullopt;
}

uint64_t TicksToNs(uint64_t ticks) {
  static const long hz = ::sysconf(_SC_CLK_TCK);
  return ticks * (1000000000ull / static_cast<uint64_t>(hz > 0 ? hz : 100));
}

std::vector<pid_t> GroupPids(const std::string& dir) {
  std::vector<pid_t> out;
  std::ifstream in(dir + "/cgroup.procs");
  long p = 0;
  while (in >> p) out.push_back(static_cast<pid_t>(p));
  return out;
}

std::optional<uint64_t> ProcessCpuNs(const std::string& proc_root, pid_t pid) {
  auto stat = ReadFileToString(proc_root + "/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return std::nullopt;  // exited meanwhile
  auto ticks = ParseProcStatCpuTicks(*stat);
  if (!ticks) return std::nullopt;
  return TicksToNs(*ticks);
}

}  // namespace

std::optional<uint64_t> ParseProcStatCpuTicks(std::string_view stat) {
  // "pid (comm) state ppid ..." — comm may hold ") ", so split after the last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view rest = stat.substr(close + 1);
  // Fields from 3 (state) on; utime is field 14, stime 15.
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < rest.size() && fields.size() < 13) {
    while (i < rest.size() && rest[i] == ' ') ++i;
    size_t j = rest.find(' ', i);
    if (j == std::string_view::npos) j = rest.size();
    if (j > i) fields.push_back(rest.substr(i, j - i));
    i = j;
  }
  if (fields.size() < 13) return std::nullopt;
  auto utime = ToU64(fields[11]);
  auto stime = ToU64(fields[12]);
  if (!utime || !stime) return std::nullopt;
  return *utime + *stime;
}

std::optional<uint64_t> ParseVmRssBytes(std::string_view status) {
  auto v = Field(status, "VmRSS");
  if (!v) return std::nullopt;
  std::string_view s = *v;
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  size_t sp = s.find(' ');
  if (sp == std::string_view::npos || s.substr(sp + 1).substr(0, 2) != "kB") return std::nullopt;
  auto kb = ToU64(s.substr(0, sp));
  if (!kb) return std::nullopt;
  return *kb * 1024;
}

std::optional<uint64_t> ParseCpuStatUsageUsec(std::string_view cpu_stat) {
  auto v = Field(cpu_stat, "usage_usec");
  if (!v) return std::nullopt;
  return ToU64(*v);
}

Result<SandboxStats> ReadVmStats(const Cgroups& cgroups, const std::string& name, pid_t pid,
                                 const std::string& proc_root) {
  SandboxStats s;
  if (!cgroups.enabled()) {
    s.source = "proc";
    auto cpu = ProcessCpuNs(proc_root, pid);
    auto status = ReadFileToString(proc_root + "/" + std::to_string(pid) + "/status");
    auto rss = status.ok() ? ParseVmRssBytes(*status) : std::nullopt;
    if (!cpu || !rss) return Status::Unavailable("VMM process " + std::to_string(pid) + " is gone");
    s.cpu_usage_ns = *cpu;
    s.memory_bytes = *rss;
    s.pids = 1;
    return s;
  }
  s.source = "cgroup";
  auto dirs = cgroups.Dirs(name);
  const std::string cpu_dir = dirs[0];
  const std::string mem_dir = cgroups.v2() ? dirs[0] : dirs[1];
  const std::string pids_dir = cgroups.v2() ? dirs[0] : dirs[2];
  const bool v2 = cgroups.v2();
  auto mem = ReadFileToString(mem_dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
  if (!mem.ok()) return Status::Unavailable("cgroup " + mem_dir + " cannot be read");
  auto mem_v = ToU64(*mem);
  if (!mem_v) return Status::DataLoss("cgroup " + mem_dir + ": bad memory usage \"" + *mem + "\"");
  s.memory_bytes = *mem_v;
  if (auto lim = ReadFileToString(mem_dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
      lim.ok()) {
    s.memory_limit_bytes = ToU64(*lim).value_or(0);  // "max": none
  }
  if (auto pids = ReadFileToString(pids_dir + "/pids.current"); pids.ok()) {
    s.pids = ToU64(*pids).value_or(0);
  }
  if (v2) {
    auto stat = ReadFileToString(cpu_dir + "/cpu.stat");
    auto usec = stat.ok() ? ParseCpuStatUsageUsec(*stat) : std::nullopt;
    if (!usec) return Status::Unavailable("cgroup " + cpu_dir + ": no cpu.stat usage_usec");
    s.cpu_usage_ns = *usec * 1000;
    return s;
  }
  auto members = GroupPids(cpu_dir);
  if (s.pids == 0) s.pids = members.size();
  for (pid_t p : members) s.cpu_usage_ns += ProcessCpuNs(proc_root, p).value_or(0);
  return s;
}

}  // namespace kubicle::noderuntime
