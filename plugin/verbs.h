// kubectl-kubicle's verbs. Each takes the parsed invocation and the world
// it acts on (a KubeClient, the namespace, the streams), so tests run them
// against an in-memory apiserver and node. Each returns the process exit
// code: 0 done, 1 failed (the reason on `err`), 2 a usage error; exec
// returns the command's own code (124 timed out, 128+N signal N, 125 when
// kubectl-kubicle itself failed).
#pragma once

#include <chrono>
#include <functional>
#include <iosfwd>
#include <string>

#include "kube/kube_client.h"
#include "plugin/args.h"

namespace kubicle::plugin {

struct Env {
  kube::KubeClient* kube = nullptr;
  std::string ns = "default";
  std::string lease_ns = "kubicle-node-lease";
  std::istream* in = nullptr;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // Blocks until a long-running verb (port-forward) should end: main waits
  // for SIGINT or SIGTERM, tests for their own signal.
  std::function<void()> wait_for_stop;
};

inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExecFailed = 125;

int RunExec(const Invocation& inv, Env& env);
// verbs_run.cc: a per-call run of a SandboxTemplate.
int RunRun(const Invocation& inv, Env& env);
int RunCp(const Invocation& inv, Env& env);
int RunLogs(const Invocation& inv, Env& env);
int RunTop(const Invocation& inv, Env& env);
int RunFork(const Invocation& inv, Env& env);
int RunSweep(const Invocation& inv, Env& env);
int RunWait(const Invocation& inv, Env& env);
// suspend / resume SBX: patches spec.suspend, then (unless --wait=false)
// waits for phase Suspended, or Ready again.
int RunSuspend(const Invocation& inv, Env& env);
int RunPortForward(const Invocation& inv, Env& env);
// Dispatches on inv.verb.
int RunVerb(const Invocation& inv, Env& env);

// Millicores from two CPU-time samples `elapsed` apart ("12m").
std::string FormatMillicores(uint64_t cpu_ns_before, uint64_t cpu_ns_after,
                             std::chrono::nanoseconds elapsed);
// Bytes as kubectl top prints them: "70Mi".
std::string FormatMebibytes(uint64_t bytes);

}  // namespace kubicle::plugin
