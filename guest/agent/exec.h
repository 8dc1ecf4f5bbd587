// ExecService: the EXEC_START / EXEC_STDIN / EXEC_SIGNAL side of the agent.
//
// Semantics (the host sees these through AgentClient::Exec):
//  - Each exec runs in its own session and process group. A timeout, a
//    lost connection or the exit of the exec's main process SIGKILLs the
//    whole group, so nothing an exec started outlives it unless the exec was
//    started with `background`: then it is detached (stdio on /dev/null,
//    inline stdin still delivered), the reply carries only the pid, and it
//    keeps running after the connection goes (its timeout still applies).
//  - stdout/stderr are streamed as EXEC_OUTPUT frames (MORE set) in the order
//    read, then one EXEC_EXIT (exit code or signal, timed_out, truncated).
//    At most output_limit bytes (default kDefaultOutputLimit) are sent; the
//    rest is read and dropped and `truncated` is set.
//  - Backpressure: while the connection is congested the output pipes are not
//    read (the process blocks on write); a stdin buffer above kStdinHigh
//    pauses reading from the connection until the process consumes it. A
//    client that streams more than that into a process which echoes it must
//    read output while it sends (else both sides wait: bounded memory wins).
//  - EXEC_STDIN for an exec that has already finished (or never streamed
//    stdin) is ignored: it races with the exit and is not an error.
//  - An exec's id is answered once: an ERROR for a running exec's id (a
//    malformed or refused EXEC_STDIN, an EXEC_START reusing the id) ends
//    the exec: its process group is killed and no OUTPUT or EXIT follows.
//  - Zombies: the agent is a child subreaper (or PID 1), and every SIGCHLD
//    reaps all exited children, including orphans of finished execs.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <utility>

#include "common/status.h"
#include "common/unique_fd.h"
#include "guest/agent/connection.h"
#include "guest/agent/image_defaults.h"
#include "guest/agent/loop.h"

namespace kubicle::guest::agent {

class ExecService {
 public:
  static constexpr size_t kMaxExecs = 256;
  static constexpr uint64_t kDefaultOutputLimit = 64ull << 20;
  static constexpr size_t kStdinHigh = 8u << 20;
  static constexpr size_t kStdinLow = 1u << 20;

  explicit ExecService(Loop* loop);
  ~ExecService();
  ExecService(const ExecService&) = delete;
  ExecService& operator=(const ExecService&) = delete;

  // Opens a signalfd for SIGCHLD (which the caller has blocked).
  Status Start();
  // The image's Env, WorkingDir and User, for every later exec (see
  // image_defaults.h for how they combine with a request's).
  void SetImageDefaults(ImageDefaults d) { defaults_ = std::move(d); }

  void HandleStart(Connection& c, const protocol::Frame& f);
  void HandleStdin(Connection& c, const protocol::Frame& f);
  void HandleSignal(Connection& c, const protocol::Frame& f);
  // An EXEC_STDIN frame refused before its payload was read (bad header).
  void RefuseStdin(Connection& c, const protocol::Frame& f, const Status& why);
  void OnDrained(Connection& c);
  void OnClosed(Connection& c);
  // SIGKILLs every exec's process group (agent shutdown).
  void KillAll();
  size_t live() const { return execs_.size(); }

 private:
  struct Exec;
  void Reap();
  void OnOutput(Exec& e, bool is_stderr);
  // Reads once from a pipe; false at EOF or error (the pipe is then closed).
  bool ReadPipe(Exec& e, bool is_stderr, bool honour_backpressure);
  void OnStdinWritable(Exec& e);
  void QueueStdin(Exec& e, const uint8_t* data, size_t n, bool eof);
  void OnExited(Exec& e, int wait_status);
  void Detach(Exec& e);
  // Ends the running foreground exec `id` of `c` with one ERROR (see above);
  // false when there is none.
  bool EndWithError(Connection& c, uint32_t id, const Status& why);
  void Finish(pid_t pid);

  Loop* loop_;
  ImageDefaults defaults_;
  UniqueFd sigfd_;
  Loop::Token sig_token_ = 0;
  std::map<pid_t, std::unique_ptr<Exec>> execs_;
  // Foreground execs by (connection, request id).
  std::map<std::pair<Connection*, uint32_t>, Exec*> by_id_;
};

}  // namespace kubicle::guest::agent
