// What one sandbox's VM uses now (SandboxService::GetSandboxStats): CPU
// time and memory read from its cgroup, or from /proc of the VMM process
// when cgroups are off. The VM's processes are kubicle-vmm and its
// short-lived helpers; a fork child has a group of its own.
//
// On cgroup v1 (this machine) the node makes groups in the cpu, memory and
// pids hierarchies, and cpu has no usage counter without cpuacct, so CPU is
// the sum of utime+stime of the group's processes (/proc/<pid>/stat, which
// counts all their threads: the vCPUs); v2 reads cpu.stat usage_usec.
// Memory is memory.usage_in_bytes (v1) or memory.current (v2): guest pages
// touched plus the VMM's own.
//
// The parsers are pure and tested on their own; ReadVmStats reads the
// files under an injected cgroup root, so tests use a fake one.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "noderuntime/vmmhost/cgroups.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime {

// utime + stime (fields 14 and 15, in clock ticks) of a /proc/<pid>/stat
// line; the command name may hold spaces and parentheses.
std::optional<uint64_t> ParseProcStatCpuTicks(std::string_view stat);
// VmRSS of /proc/<pid>/status, in bytes.
std::optional<uint64_t> ParseVmRssBytes(std::string_view status);
// usage_usec of a v2 cpu.stat, in microseconds.
std::optional<uint64_t> ParseCpuStatUsageUsec(std::string_view cpu_stat);

// Fills cpu_usage_ns, memory_bytes, memory_limit_bytes, pids and source
// from the group `name` when `cgroups` is enabled, else from `pid`. The
// procfs root is injectable for tests ("/proc").
Result<SandboxStats> ReadVmStats(const Cgroups& cgroups, const std::string& name, pid_t pid,
                                 const std::string& proc_root = "/proc");

}  // namespace kubicle::noderuntime
