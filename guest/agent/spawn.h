// Spawn: starts one child process for an exec, the way the agent needs it:
// a new session (so the whole process tree is one process group that a
// timeout can kill), stdio on pipes or /dev/null, a clean signal state, an
// exact environment and working directory. Errors before execve (no such
// program, bad cwd) come back as a Status, not as a child that exits 127.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::guest::agent {

inline constexpr const char* kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in the env's PATH
  std::vector<std::string> env;   // the complete environment, KEY=VALUE
  std::string cwd;                // empty: inherit
  bool pipe_stdin = false;        // else /dev/null
  bool capture_output = true;     // else stdout and stderr go to /dev/null
  // Run as uid/gid with exactly these supplementary groups (the image's
  // User); else as the agent.
  bool set_ids = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

struct Spawned {
  pid_t pid = -1;  // also the process group id
  UniqueFd stdin_w;   // non-blocking, when pipe_stdin
  UniqueFd stdout_r;  // non-blocking, when capture_output
  UniqueFd stderr_r;
};

Result<Spawned> Spawn(const SpawnSpec& spec);

// `base` (e.g. environ) with `overrides` applied: an override replaces the
// entry with the same key, new keys are appended, order is kept.
std::vector<std::string> MergeEnv(char** base, const std::vector<std::string>& overrides);

// The executable for argv0: itself when it contains '/', else the first
// executable regular file on `path_var` (kDefaultPath when empty).
Result<std::string> ResolveProgram(const std::string& argv0, const std::string& path_var);

}  // namespace kubicle::guest::agent
