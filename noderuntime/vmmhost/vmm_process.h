// The node's handle on kubicle-vmm processes: spawning them detached so they
// outlive the daemon, identifying them across a daemon restart (pid plus the
// kernel's start time, so a reused pid is never mistaken for our VMM),
// pidfds, the control socket, and the /proc scan that finds orphans.
//
// Contracts: spawned processes get their own session, stdin from /dev/null,
// stdout and stderr appended to a log file, and no other fd of ours (closed
// from 3 up in the child before exec). The control socket is spoken through
// vmm::control::ControlClient (vmm/control_client.h), the one client.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime {

struct VmmHandle {
  pid_t pid = -1;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)
  UniqueFd pidfd;
};

Result<VmmHandle> SpawnDetached(const std::vector<std::string>& argv, const std::string& log_path);
// Opens a pidfd for a process we did not start and checks its start time.
Result<VmmHandle> AttachProcess(pid_t pid, std::optional<uint64_t> expected_start_time);
Result<uint64_t> ProcessStartTime(pid_t pid);
// Seconds since the process started (0 if it cannot be read).
double ProcessAgeSeconds(pid_t pid);

// Signals through the pidfd (never a reused pid). Ok if it already exited.
Status PidfdKill(int pidfd, int sig);
// True once the process has exited (pidfd readable), waiting up to timeout.
bool WaitExited(int pidfd, std::chrono::milliseconds timeout);
// Reaps the process if it is our child and has exited: its exit code, or
// 128 + signal. nullopt if not our child or still running.
std::optional<int> ReapIfChild(int pidfd);
// Describes a reaped status: "exit code 3" / "killed by signal 9".
std::string DescribeExit(int code);

// Polls `status` until it answers, the process exits or the timeout passes.
Status WaitForControl(const std::string& socket_path, int pidfd, std::chrono::milliseconds timeout);

// Pids of processes whose argv[0] is `vmm_binary` (same file name) and one of
// whose arguments lies under `state_dir`.
std::vector<pid_t> FindVmmProcesses(const std::string& vmm_binary, const std::string& state_dir);

}  // namespace kubicle::noderuntime
