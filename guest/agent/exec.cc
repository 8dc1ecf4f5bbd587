#include "guest/agent/exec.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "guest/agent/agent_log.h"
#include "guest/agent/spawn.h"

extern char** environ;

namespace kubicle::guest::agent {

using protocol::Frame;
using protocol::OutputStream;

struct ExecService::Exec {
  pid_t pid = -1;
  Connection* conn = nullptr;  // null for background or after the connection closed
  uint32_t id = 0;
  bool background = false;
  UniqueFd in, out, err;
  Loop::Token in_tok = 0, out_tok = 0, err_tok = 0;
  std::vector<uint8_t> stdin_buf;
  size_t stdin_off = 0;
  bool stdin_eof = false;     // the host has sent all of stdin
  bool paused_conn = false;   // we hold a PauseReading on conn
  uint64_t limit = 0;
  uint64_t kept = 0;
  bool truncated = false;
  bool timed_out = false;
  bool done = false;
  Loop::Token timer = 0;
};

ExecService::ExecService(Loop* loop) : loop_(loop) {}

ExecService::~ExecService() {
  KillAll();
  if (sig_token_ != 0) loop_->Unwatch(sig_token_);
}

Status ExecService::Start() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigfd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!sigfd_) return Status::FromErrno("signalfd");
  ASSIGN_OR_RETURN(sig_token_, loop_->Watch(sigfd_.get(), EPOLLIN, [this](uint32_t) {
    signalfd_siginfo si;
    while (::read(sigfd_.get(), &si, sizeof(si)) == ssize_t(sizeof(si))) {
    }
    Reap();
  }));
  return Status::Ok();
}

namespace {
void Unwatch(Loop* loop, Loop::Token* t) {
  if (*t != 0) loop->Unwatch(*t);
  *t = 0;
}
}  // namespace

void ExecService::HandleStart(Connection& c, const Frame& f) {
  // Checked before the payload: any ERROR for a running exec's id ends it.
  if (EndWithError(c, f.id, Status::AlreadyExists("an exec with this id was running; it is "
                                                  "killed, the new one is not started"))) {
    return;
  }
  auto req = protocol::ExecStartRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  if (execs_.size() >= kMaxExecs) {
    return c.SendError(f.id, Status::ResourceExhausted("too many running execs (limit " +
                                                       std::to_string(kMaxExecs) + ")"));
  }
  SpawnSpec spec;
  spec.argv = req->argv.empty() ? std::vector<std::string>{"/bin/sh", "-c", req->shell_command}
                                : req->argv;
  // Environment, lowest first: the agent's, the image user's HOME, the
  // image's Env, the request's env. as_agent: the agent's alone.
  static const ImageDefaults kNoDefaults;
  const ImageDefaults& image = req->as_agent ? kNoDefaults : defaults_;
  std::vector<std::string> env;
  if (!image.user.empty()) {
    auto cred = ResolveUser(image.user);
    if (!cred.ok())
      return c.SendError(f.id, Status(StatusCode::kFailedPrecondition,
                                      "the image's User: " + cred.status().message()));
    spec.set_ids = true;
    spec.uid = cred->uid;
    spec.gid = cred->gid;
    spec.groups = cred->groups;
    if (!cred->home.empty()) env.push_back("HOME=" + cred->home);
  }
  env.insert(env.end(), image.env.begin(), image.env.end());
  env.insert(env.end(), req->env.begin(), req->env.end());
  spec.env = MergeEnv(environ, env);
  spec.cwd = req->cwd.empty() ? image.working_dir : req->cwd;
  spec.pipe_stdin = req->stdin_streamed || !req->stdin_data.empty();
  spec.capture_output = !req->background;
  auto spawned = Spawn(spec);
  if (!spawned.ok()) return c.SendError(f.id, spawned.status());

  auto e = std::make_unique<Exec>();
  Exec& x = *e;
  x.pid = spawned->pid;
  x.id = f.id;
  x.background = req->background;
  x.conn = req->background ? nullptr : &c;
  x.limit = req->output_limit != 0 ? req->output_limit : kDefaultOutputLimit;
  x.in = std::move(spawned->stdin_w);
  x.out = std::move(spawned->stdout_r);
  x.err = std::move(spawned->stderr_r);
  execs_.emplace(x.pid, std::move(e));
  if (!x.background) by_id_[{&c, f.id}] = &x;

  if (x.in) {
    auto tok = loop_->Watch(x.in.get(), 0, [this, &x](uint32_t) { OnStdinWritable(x); });
    if (tok.ok()) x.in_tok = *tok;
  }
  if (x.out) {
    auto t1 = loop_->Watch(x.out.get(), EPOLLIN, [this, &x](uint32_t) { OnOutput(x, false); });
    auto t2 = loop_->Watch(x.err.get(), EPOLLIN, [this, &x](uint32_t) { OnOutput(x, true); });
    if (t1.ok()) x.out_tok = *t1;
    if (t2.ok()) x.err_tok = *t2;
  }
  if (req->timeout_ms != 0) {
    const auto ms = std::chrono::milliseconds(std::min<uint64_t>(req->timeout_ms, 1ull << 40));
    x.timer = loop_->AddTimer(SteadyClock::now() + ms, [this, &x] {
      x.timer = 0;
      x.timed_out = true;
      ::kill(-x.pid, SIGKILL);
    });
  }
  LogDebug("exec started", "pid=" + std::to_string(x.pid) + " id=" + std::to_string(f.id) +
                               " background=" + (x.background ? "1" : "0"));
  // Foreground execs stream output and an exit after this: MORE.
  c.Reply(protocol::ExecStartReply{uint32_t(x.pid)}, f.id,
          x.background ? 0u : uint32_t(protocol::kFlagMore));
  if (!req->stdin_data.empty()) {
    QueueStdin(x, req->stdin_data.data(), req->stdin_data.size(), true);
  } else if (!req->stdin_streamed && x.in) {
    x.in.reset();
  }
}

void ExecService::QueueStdin(Exec& e, const uint8_t* data, size_t n, bool eof) {
  if (!e.in) return;  // stdin already closed (the process exited or closed it)
  if (e.stdin_off > 0 && e.stdin_off == e.stdin_buf.size()) {
    e.stdin_buf.clear();
    e.stdin_off = 0;
  }
  e.stdin_buf.insert(e.stdin_buf.end(), data, data + n);
  e.stdin_eof = e.stdin_eof || eof;
  if (e.conn != nullptr && !e.paused_conn && e.stdin_buf.size() - e.stdin_off > kStdinHigh) {
    e.paused_conn = true;
    e.conn->PauseReading();
  }
  OnStdinWritable(e);
}

void ExecService::OnStdinWritable(Exec& e) {
  while (e.in && e.stdin_off < e.stdin_buf.size()) {
    const ssize_t n = ::write(e.in.get(), e.stdin_buf.data() + e.stdin_off,
                              e.stdin_buf.size() - e.stdin_off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n < 0) {  // EPIPE: the process closed stdin; drop the rest
      e.stdin_off = e.stdin_buf.size();
      e.stdin_eof = true;
      break;
    }
    e.stdin_off += size_t(n);
  }
  const size_t pending = e.stdin_buf.size() - e.stdin_off;
  if (e.paused_conn && pending < kStdinLow) {
    e.paused_conn = false;
    if (e.conn != nullptr) e.conn->ResumeReading();
  }
  if (pending == 0) {
    e.stdin_buf.clear();
    e.stdin_off = 0;
    if (e.stdin_eof) {
      Unwatch(loop_, &e.in_tok);
      e.in.reset();
      return;
    }
  }
  if (e.in_tok != 0) loop_->Modify(e.in_tok, pending > 0 ? uint32_t(EPOLLOUT) : 0u);
}

bool ExecService::EndWithError(Connection& c, uint32_t id, const Status& why) {
  auto it = by_id_.find({&c, id});
  if (it == by_id_.end()) return false;
  Exec& e = *it->second;
  ::kill(-e.pid, SIGKILL);
  if (e.paused_conn) c.ResumeReading();
  Detach(e);  // what it still prints is read and dropped; its exit is not sent
  c.SendError(id, why);
  return true;
}

void ExecService::RefuseStdin(Connection& c, const Frame& f, const Status& why) {
  // Stdin is never answered: for an exec that is gone, an ERROR would be a
  // second answer after its EXIT.
  if (!EndWithError(c, f.id, why)) {
    LogDebug("refused stdin for a finished or unknown exec ignored", "id=" + std::to_string(f.id));
  }
}

void ExecService::HandleStdin(Connection& c, const Frame& f) {
  auto chunk = protocol::ExecStdinChunk::Decode(f.payload);
  if (!chunk.ok()) return RefuseStdin(c, f, chunk.status());
  auto it = by_id_.find({&c, f.id});
  if (it == by_id_.end()) {
    LogDebug("stdin for a finished or unknown exec ignored", "id=" + std::to_string(f.id));
    return;
  }
  Exec& e = *it->second;
  if (e.stdin_eof) return;
  QueueStdin(e, chunk->data.data(), chunk->data.size(), !f.has_more());
}

void ExecService::HandleSignal(Connection& c, const Frame& f) {
  auto req = protocol::ExecSignalRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  auto it = by_id_.find({&c, req->exec_id});
  if (it == by_id_.end()) {
    return c.SendError(f.id, Status::NotFound("no running exec with id " +
                                              std::to_string(req->exec_id) + " on this connection"));
  }
  if (::kill(-it->second->pid, int(req->signal)) < 0) {
    return c.SendError(f.id, Status::FromErrno("kill"));
  }
  c.Reply(protocol::EmptyMessageReply<protocol::MsgType::kExecSignal>{}, f.id);
}

bool ExecService::ReadPipe(Exec& e, bool is_stderr, bool honour_backpressure) {
  UniqueFd& fd = is_stderr ? e.err : e.out;
  Loop::Token& tok = is_stderr ? e.err_tok : e.out_tok;
  if (!fd) return false;
  if (honour_backpressure && e.conn != nullptr && e.conn->Congested()) {
    loop_->Modify(tok, 0);  // OnDrained re-arms us
    return false;
  }
  uint8_t buf[protocol::kMaxChunk];
  const size_t want = e.conn != nullptr ? e.conn->MaxChunk() : sizeof(buf);
  const ssize_t n = ::read(fd.get(), buf, want);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (n <= 0) {
    Unwatch(loop_, &tok);
    fd.reset();
    return false;
  }
  const uint64_t room = e.kept < e.limit ? e.limit - e.kept : 0;
  const size_t keep = size_t(std::min<uint64_t>(room, uint64_t(n)));
  if (keep < size_t(n)) e.truncated = true;
  if (keep > 0 && e.conn != nullptr) {
    protocol::ExecOutputChunk chunk;
    chunk.stream = is_stderr ? OutputStream::kStderr : OutputStream::kStdout;
    chunk.data.assign(buf, buf + keep);
    e.conn->Reply(chunk, e.id, protocol::kFlagMore);
  }
  e.kept += keep;
  return true;
}

void ExecService::OnOutput(Exec& e, bool is_stderr) { ReadPipe(e, is_stderr, true); }

void ExecService::OnDrained(Connection& c) {
  for (auto& [key, e] : by_id_) {
    if (key.first != &c) continue;
    if (e->out_tok != 0) loop_->Modify(e->out_tok, EPOLLIN);
    if (e->err_tok != 0) loop_->Modify(e->err_tok, EPOLLIN);
  }
}

void ExecService::Detach(Exec& e) {
  if (e.conn != nullptr) by_id_.erase({e.conn, e.id});
  e.conn = nullptr;
  e.paused_conn = false;
}

void ExecService::OnClosed(Connection& c) {
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    Exec* e = it->second;
    ++it;
    if (e->conn != &c) continue;
    ::kill(-e->pid, SIGKILL);  // a foreground exec does not outlive its client
    Detach(*e);
  }
}

void ExecService::KillAll() {
  for (auto& [pid, e] : execs_) {
    if (!e->done) ::kill(-pid, SIGKILL);
  }
}

void ExecService::Reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;  // 0: none exited; -1/ECHILD: no children left
    auto it = execs_.find(pid);
    if (it != execs_.end() && !it->second->done) OnExited(*it->second, status);
  }
}

void ExecService::OnExited(Exec& e, int wait_status) {
  e.done = true;
  if (e.timer != 0) loop_->CancelTimer(e.timer);
  e.timer = 0;
  // What the main process left behind in its group goes with it.
  if (!e.background) ::kill(-e.pid, SIGKILL);
  // Whatever is still in the pipes was written before the exit: deliver it,
  // bounded so a writer that escaped the group cannot keep us here.
  for (bool is_stderr : {false, true}) {
    for (int i = 0; i < 64 && ReadPipe(e, is_stderr, false); ++i) {
    }
    Unwatch(loop_, is_stderr ? &e.err_tok : &e.out_tok);
    (is_stderr ? e.err : e.out).reset();
  }
  Unwatch(loop_, &e.in_tok);
  e.in.reset();
  if (e.paused_conn && e.conn != nullptr) e.conn->ResumeReading();
  e.paused_conn = false;
  if (e.conn != nullptr) {
    protocol::ExecExitReply r;
    if (WIFSIGNALED(wait_status)) {
      r.signal = uint32_t(WTERMSIG(wait_status));
    } else {
      r.exit_code = WEXITSTATUS(wait_status);
    }
    r.timed_out = e.timed_out;
    r.truncated = e.truncated;
    e.conn->Reply(r, e.id);
  }
  LogDebug("exec exited", "pid=" + std::to_string(e.pid) + " status=" +
                              std::to_string(wait_status) +
                              " timed_out=" + (e.timed_out ? "1" : "0"));
  Detach(e);
  const pid_t pid = e.pid;
  loop_->Defer([this, pid] { execs_.erase(pid); });
}

}  // namespace kubicle::guest::agent
