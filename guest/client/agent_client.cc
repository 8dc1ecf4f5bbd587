// AgentClient core: connection setup, HELLO, sending frames, and the
// leader/follower reader that routes incoming frames to waiting requests.
#include "guest/client/agent_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/log.h"
#include "guest/client/socket_util.h"

namespace kubicle::guest::client {

using protocol::Frame;
using protocol::MsgType;

AgentClient::AgentClient(UniqueFd fd, ClientOptions options)
    : fd_(std::move(fd)), options_(std::move(options)), decoder_(options_.max_payload) {}

AgentClient::~AgentClient() = default;

Result<std::unique_ptr<AgentClient>> AgentClient::Adopt(UniqueFd fd, ClientOptions options,
                                                        Deadline deadline) {
  if (!fd) return Status::InvalidArgument("adopt: invalid fd");
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) < 0) {
    return Status::FromErrno("fcntl O_NONBLOCK");
  }
  if (options.max_payload < protocol::kMinPayloadLimit ||
      options.max_payload > protocol::kMaxPayload) {
    return Status::InvalidArgument("ClientOptions::max_payload out of range");
  }
  std::unique_ptr<AgentClient> c(new AgentClient(std::move(fd), std::move(options)));
  RETURN_IF_ERROR(c->Hello(c->Resolve(deadline)).WithContext("agent HELLO"));
  return c;
}

Result<std::unique_ptr<AgentClient>> AgentClient::ConnectUnix(const std::string& path,
                                                              ClientOptions options,
                                                              Deadline deadline) {
  const Deadline d = deadline == Deadline{} ? Clock::now() + options.default_timeout : deadline;
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnixSocket(path, d));
  return Adopt(std::move(fd), std::move(options), d);
}

Result<std::unique_ptr<AgentClient>> AgentClient::ConnectVsock(const std::string& uds_path,
                                                               uint32_t port,
                                                               ClientOptions options,
                                                               Deadline deadline) {
  const Deadline d = deadline == Deadline{} ? Clock::now() + options.default_timeout : deadline;
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectVsockUds(uds_path, port, d));
  return Adopt(std::move(fd), std::move(options), d);
}

Status AgentClient::Hello(Deadline deadline) {
  protocol::HelloRequest req;
  req.name = options_.name;
  req.software_version = options_.software_version;
  req.max_payload = options_.max_payload;
  ASSIGN_OR_RETURN(protocol::HelloReply reply, (Call<protocol::HelloReply>(req, deadline)));
  if (reply.version < protocol::kMinVersion || reply.version > protocol::kMaxVersion) {
    return Status::FailedPrecondition("agent chose protocol version " +
                                      std::to_string(reply.version) + ", we support " +
                                      std::to_string(protocol::kMinVersion) + ".." +
                                      std::to_string(protocol::kMaxVersion));
  }
  version_ = reply.version;
  agent_ = std::move(reply);
  return Status::Ok();
}

Deadline AgentClient::Resolve(Deadline d) const {
  return d == Deadline{} ? Clock::now() + options_.default_timeout : d;
}

uint32_t AgentClient::NextId() {
  for (;;) {
    const uint32_t id = next_id_.fetch_add(1);
    if (id != 0) return id;  // 0 is reserved for connection-level frames
  }
}

void AgentClient::Register(uint32_t id) {
  std::lock_guard l(mu_);
  pending_[id].last_take = Clock::now();
}

void AgentClient::Unregister(uint32_t id) {
  std::lock_guard l(mu_);
  pending_.erase(id);
  cv_.notify_all();  // it may have been the full queue holding readers back
}

Status AgentClient::health() const {
  std::lock_guard l(mu_);
  return broken_;
}

uint64_t AgentClient::requests_cut_off() const {
  std::lock_guard l(mu_);
  return requests_cut_off_;
}

void AgentClient::Break(Status cause) {
  if (broken_.ok()) {
    broken_ = Status::Unavailable("agent connection broken: " + cause.ToString());
    log::Warn("agent connection broken", {{"cause", cause.ToString()}});
    // Nothing more is read or sent: tell the agent, and let the kernel drop
    // whatever it still sends rather than queue it for us.
    ::shutdown(fd_.get(), SHUT_RDWR);
  }
  cv_.notify_all();
}

Status AgentClient::SendBytes(ByteSpan bytes, Deadline deadline) {
  {
    std::lock_guard l(mu_);
    if (!broken_.ok()) return broken_;
  }
  std::lock_guard w(write_mu_);
  size_t written = 0;
  Status s = SendAll(fd_.get(), bytes, deadline, &written);
  if (!s.ok() && (written > 0 || s.code() != StatusCode::kDeadlineExceeded)) {
    // A half-written frame (or a dead socket) leaves the stream unusable.
    std::lock_guard l(mu_);
    Break(s);
    return broken_;
  }
  return s;
}

Status AgentClient::SendFrame(const Frame& frame, Deadline deadline) {
  if (frame.payload.size() > agent_.max_payload) {
    return Status::InvalidArgument(protocol::MsgTypeName(frame.type) + " payload of " +
                                   std::to_string(frame.payload.size()) +
                                   " bytes exceeds the agent's limit of " +
                                   std::to_string(agent_.max_payload));
  }
  Frame f = frame;
  if (f.type != MsgType::kHello) f.version = version_;
  ASSIGN_OR_RETURN(Bytes bytes, protocol::EncodeFrame(f));
  return SendBytes(bytes, deadline);
}

void AgentClient::ReadAndDispatch(Deadline deadline, std::unique_lock<std::mutex>& lock) {
  reader_active_ = true;
  lock.unlock();
  uint8_t buf[64 * 1024];
  ssize_t n = -1;
  Status io;
  Status waited = WaitFd(fd_.get(), POLLIN, deadline);
  if (waited.ok()) {
    n = ::recv(fd_.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno != EAGAIN && errno != EINTR) io = Status::FromErrno("recv");
  }
  lock.lock();
  reader_active_ = false;
  if (n == 0) {
    Break(Status::Unavailable("agent closed the connection"));
  } else if (!io.ok()) {
    Break(io);
  } else if (n > 0) {
    decoder_.Append(ByteSpan(buf, size_t(n)));
    for (;;) {
      auto next = decoder_.Next();
      if (!next.ok()) {
        Break(next.status());
        break;
      }
      if (!next->has_value()) break;
      Frame& f = **next;
      if (f.id == 0 && f.type == MsgType::kError) {
        auto err = protocol::ErrorReply::Decode(f.payload);
        Break(err.ok() ? err->ToStatus() : Status::DataLoss("malformed connection ERROR"));
        break;
      }
      auto it = pending_.find(f.id);
      if (it == pending_.end() || !it->second.cut.ok()) {
        log::Debug("agent frame for unknown request dropped",
                   {{"id", f.id}, {"type", protocol::MsgTypeName(f.type)}});
        continue;
      }
      Pending& p = it->second;
      const uint64_t cap = options_.limits.max_queued_bytes_per_request;
      const bool was_full = p.bytes >= cap;
      p.bytes += protocol::kHeaderSize + f.payload.size();
      if (!was_full && p.bytes >= cap) p.full_since = Clock::now();
      p.frames.push_back(std::move(f));
    }
  }
  cv_.notify_all();
}

AgentClient::Pending* AgentClient::FullQueue(Clock::time_point* cut_at) {
  for (auto& [id, p] : pending_) {
    if (p.bytes < options_.limits.max_queued_bytes_per_request) continue;
    *cut_at = std::max(p.full_since, p.last_take) + options_.limits.stall_timeout;
    return &p;
  }
  return nullptr;
}

Result<Frame> AgentClient::Await(uint32_t id, Deadline deadline) {
  std::unique_lock l(mu_);
  for (;;) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return Status::Internal("await on unregistered request id");
    Pending& mine = it->second;
    if (!mine.frames.empty()) {
      Frame f = std::move(mine.frames.front());
      mine.frames.pop_front();
      const uint64_t cap = options_.limits.max_queued_bytes_per_request;
      const bool was_full = mine.bytes >= cap;
      mine.bytes -= protocol::kHeaderSize + f.payload.size();
      mine.last_take = Clock::now();
      if (was_full && mine.bytes < cap) cv_.notify_all();  // readers may go on
      return f;
    }
    if (!mine.cut.ok()) return mine.cut;
    if (!broken_.ok()) return broken_;
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status::DeadlineExceeded("no reply from the agent for request " + std::to_string(id));
    }
    if (reader_active_) {
      cv_.wait_until(l, deadline);
      continue;
    }
    // A full queue stops all reading (the agent waits on the transport)
    // until its caller takes a frame, or until it is cut off.
    Clock::time_point cut_at;
    if (Pending* full = FullQueue(&cut_at)) {
      if (now < cut_at) {
        cv_.wait_until(l, std::min(deadline, cut_at));
        continue;
      }
      full->cut = Status::ResourceExhausted(
          std::to_string(full->bytes) + " bytes from the agent waited " +
          std::to_string(options_.limits.stall_timeout.count()) +
          " ms for a caller that took none of them; the request was cut off");
      log::Warn("agent request cut off: its caller stopped reading",
                {{"queued_bytes", full->bytes}});
      full->frames.clear();
      full->bytes = 0;
      ++requests_cut_off_;
      cv_.notify_all();
      continue;
    }
    ReadAndDispatch(deadline, l);
  }
}

Result<Frame> AgentClient::AwaitReply(uint32_t id, MsgType type, Deadline deadline) {
  ASSIGN_OR_RETURN(Frame f, Await(id, deadline));
  if (f.type == MsgType::kError) {
    auto err = protocol::ErrorReply::Decode(f.payload);
    if (!err.ok()) return Status::DataLoss("malformed ERROR from agent: " + err.status().message());
    return err->ToStatus();
  }
  if (!f.is_reply() || f.type != type) {
    return Status::DataLoss("unexpected " + protocol::MsgTypeName(f.type) +
                            (f.is_reply() ? " reply" : " (not a reply)") + " while waiting for " +
                            protocol::MsgTypeName(type));
  }
  return f;
}

Result<Frame> AgentClient::RawExchange(uint32_t id, ByteSpan raw, Deadline deadline) {
  deadline = Resolve(deadline);
  IdGuard guard(this, id);
  RETURN_IF_ERROR(SendBytes(raw, deadline));
  return Await(id, deadline);
}

}  // namespace kubicle::guest::client
