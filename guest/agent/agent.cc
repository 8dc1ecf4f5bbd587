#include "guest/agent/agent.h"

#include <linux/vm_sockets.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "guest/agent/agent_log.h"

namespace kubicle::guest::agent {

using protocol::Frame;
using protocol::MsgType;

Agent::Agent(Loop* loop, AgentOptions options)
    : loop_(loop), options_(std::move(options)), execs_(loop), system_(options_.system) {}

Agent::~Agent() { Shutdown(); }

namespace {
Result<UniqueFd> ListenUnix(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return Status::InvalidArgument("unix path too long");
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return Status::FromErrno("socket(AF_UNIX)");
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());  // stale
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    return Status::FromErrno("bind " + path);
  }
  if (::listen(fd.get(), 64) < 0) return Status::FromErrno("listen " + path);
  return fd;
}

Result<UniqueFd> ListenVsock(uint32_t port) {
  UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return Status::FromErrno("socket(AF_VSOCK)");
  sockaddr_vm addr{};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = VMADDR_CID_ANY;
  addr.svm_port = port;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    return Status::FromErrno("bind vsock port " + std::to_string(port));
  }
  if (::listen(fd.get(), 64) < 0) return Status::FromErrno("listen vsock");
  return fd;
}
}  // namespace

Status Agent::Start() {
  RETURN_IF_ERROR(execs_.Start());
  if (!options_.image_config.empty()) execs_.SetImageDefaults(LoadImageDefaults(options_.image_config));
  if (options_.vsock) {
    ASSIGN_OR_RETURN(UniqueFd fd, ListenVsock(options_.vsock_port));
    RETURN_IF_ERROR(Listen(std::move(fd), "vsock:" + std::to_string(options_.vsock_port)));
  }
  if (!options_.unix_path.empty()) {
    ASSIGN_OR_RETURN(UniqueFd fd, ListenUnix(options_.unix_path));
    RETURN_IF_ERROR(Listen(std::move(fd), "unix:" + options_.unix_path));
  }
  if (listeners_.empty()) return Status::InvalidArgument("no listener configured");
  return Status::Ok();
}

Status Agent::Listen(UniqueFd fd, std::string what) {
  const int raw = fd.get();
  ASSIGN_OR_RETURN(Loop::Token t, loop_->Watch(raw, EPOLLIN, [this, raw, what](uint32_t) {
    Accept(raw, what);
  }));
  listeners_.push_back(std::move(fd));
  listen_tokens_.push_back(t);
  LogInfo("listening", "on=" + what);
  return Status::Ok();
}

void Agent::Accept(int listen_fd, const std::string& what) {
  for (int i = 0; i < 16; ++i) {
    UniqueFd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno != EAGAIN && errno != EINTR) LogWarn("accept failed", "error=\"" + std::string(strerror(errno)) + "\"");
      return;
    }
    if (connections_.size() >= kMaxConnections) {
      LogWarn("connection refused", "reason=too_many_connections");
      continue;  // closing it is the refusal
    }
    auto conn = std::make_unique<Connection>(loop_, std::move(fd), what, this);
    if (Status s = conn->Start(); !s.ok()) {
      LogWarn("connection setup failed", "error=\"" + s.ToString() + "\"");
      continue;
    }
    Connection* raw = conn.get();
    connections_.emplace(raw, std::move(conn));
    LogDebug("connection accepted", "on=" + what);
  }
}

void Agent::Shutdown() {
  execs_.KillAll();
  while (!connections_.empty()) {
    auto it = connections_.begin();
    std::unique_ptr<Connection> conn = std::move(it->second);
    connections_.erase(it);
    conn->Close("agent shutdown");  // OnClosed finds it already gone: fine
  }
  for (Loop::Token t : listen_tokens_) loop_->Unwatch(t);
  listen_tokens_.clear();
  listeners_.clear();
}

void Agent::OnClosed(Connection& c) {
  execs_.OnClosed(c);
  files_.OnClosed(c);
  auto it = connections_.find(&c);
  if (it == connections_.end()) return;
  // We may be inside one of the connection's handlers: destroy it later.
  std::shared_ptr<Connection> doomed(std::move(it->second));
  connections_.erase(it);
  loop_->Defer([doomed] {});
}

void Agent::OnDrained(Connection& c) { execs_.OnDrained(c); }

Status Agent::CheckHeader(const Connection& c, const Frame& f) const {
  if (f.type == MsgType::kHello) {
    if (f.version != protocol::kVersion1) {
      return Status::FailedPrecondition("HELLO must use protocol version 1");
    }
  } else if (f.version != c.version()) {
    return Status::FailedPrecondition("frame version " + std::to_string(f.version) +
                                      " is not the negotiated version " +
                                      std::to_string(c.version()));
  }
  if (f.is_reply()) return Status::InvalidArgument("the agent does not accept replies");
  if ((f.flags & ~protocol::kKnownFlags) != 0) return Status::InvalidArgument("unknown frame flags");
  if (f.id == 0) return Status::InvalidArgument("request id 0 is reserved");
  const bool streamed = f.type == MsgType::kFileWrite || f.type == MsgType::kExecStdin;
  if (f.has_more() && !streamed) {
    return Status::InvalidArgument(protocol::MsgTypeName(f.type) + " cannot carry MORE");
  }
  return Status::Ok();
}

void Agent::OnFrame(Connection& c, Frame f) {
  if (Status s = CheckHeader(c, f); !s.ok()) return Refuse(c, f, s);
  Dispatch(c, f);
}

void Agent::Refuse(Connection& c, const Frame& f, const Status& why) {
  if (f.id != 0 && f.type == MsgType::kFileWrite) return files_.RefuseWrite(c, f, why);
  if (f.id != 0 && f.type == MsgType::kExecStdin) return execs_.RefuseStdin(c, f, why);
  c.SendError(f.id, why);
}

void Agent::Dispatch(Connection& c, Frame& f) {
  switch (f.type) {
    case MsgType::kHello: return Hello(c, f);
    case MsgType::kPing: {
      auto req = protocol::PingRequest::Decode(f.payload);
      if (!req.ok()) return c.SendError(f.id, req.status());
      return c.Reply(protocol::PongReply{req->nonce}, f.id);
    }
    case MsgType::kEcho: {
      auto req = protocol::EchoMessage::Decode(f.payload);
      if (!req.ok()) return c.SendError(f.id, req.status());
      return c.Reply(*req, f.id);
    }
    case MsgType::kExecStart: return execs_.HandleStart(c, f);
    case MsgType::kExecStdin: return execs_.HandleStdin(c, f);
    case MsgType::kExecSignal: return execs_.HandleSignal(c, f);
    case MsgType::kFileWrite: return files_.HandleWrite(c, f);
    case MsgType::kFileRead: return files_.HandleRead(c, f);
    case MsgType::kStat: return files_.HandleStat(c, f);
    case MsgType::kList: return files_.HandleList(c, f);
    case MsgType::kMkdir: return files_.HandleMkdir(c, f);
    case MsgType::kRemove: return files_.HandleRemove(c, f);
    case MsgType::kChmod: return files_.HandleChmod(c, f);
    case MsgType::kIdentity: return system_.HandleIdentity(c, f);
    case MsgType::kPostRestore: return system_.HandlePostRestore(c, f);
    case MsgType::kMemFill: return system_.HandleMemFill(c, f);
    case MsgType::kMemChecksum: return system_.HandleMemChecksum(c, f);
    case MsgType::kEntropyRead: return system_.HandleEntropyRead(c, f);
    case MsgType::kPong:
    case MsgType::kError:
    case MsgType::kExecOutput:
    case MsgType::kExecExit:
      return c.SendError(f.id, Status::InvalidArgument(protocol::MsgTypeName(f.type) +
                                                       " is sent by the agent, not to it"));
    default:  // test-guest-only messages (DISK_*) and types from the future
      break;
  }
  c.SendError(f.id, Status::Unimplemented("unknown message " + protocol::MsgTypeName(f.type)));
}

void Agent::Hello(Connection& c, const Frame& f) {
  auto req = protocol::HelloRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  const uint16_t v = protocol::NegotiateVersion(req->min_version, req->max_version,
                                                protocol::kMinVersion, protocol::kMaxVersion);
  if (v == 0) return c.SendError(f.id, Status::FailedPrecondition("no common protocol version"));
  c.SetNegotiated(v, req->max_payload);
  protocol::HelloReply r;
  r.version = v;
  r.name = kAgentName;
  r.software_version = kAgentVersion;
  r.capabilities = {"exec", "files", "post-restore", "mem", "entropy", "linux"};
  r.max_payload = protocol::kMaxPayload;
  c.Reply(r, f.id);
}

}  // namespace kubicle::guest::agent
