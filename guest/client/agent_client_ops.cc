// AgentClient operations: one method per agent request (see agent_client.h).
#include <algorithm>

#include "guest/client/agent_client.h"

namespace kubicle::guest::client {

using protocol::Frame;
using protocol::MsgType;

Status AgentClient::Ping(Deadline deadline) {
  const uint64_t nonce = (uint64_t(NextId()) << 32) ^ uint64_t(Clock::now().time_since_epoch().count());
  ASSIGN_OR_RETURN(auto pong, (Call<protocol::PongReply>(protocol::PingRequest{nonce},
                                                         Resolve(deadline))));
  if (pong.nonce != nonce) return Status::DataLoss("PONG carries the wrong nonce");
  return Status::Ok();
}

Result<Bytes> AgentClient::Echo(ByteSpan data, Deadline deadline) {
  protocol::EchoMessage m{Bytes(data.begin(), data.end())};
  ASSIGN_OR_RETURN(auto reply, (Call<protocol::EchoMessage>(m, Resolve(deadline))));
  return std::move(reply.data);
}

namespace {
Status StreamStdin(uint32_t id, const ExecIo& io,
                   const std::function<Status(const Frame&)>& send) {
  for (;;) {
    std::optional<Bytes> chunk = io.next_stdin ? io.next_stdin() : std::nullopt;
    Frame f;
    if (!chunk.has_value()) {
      f = protocol::MakeFrame(protocol::ExecStdinChunk{}, id);  // EOF: no MORE
      return send(f);
    }
    size_t off = 0;
    do {
      const size_t n = std::min<size_t>(protocol::kMaxChunk, chunk->size() - off);
      protocol::ExecStdinChunk piece{Bytes(chunk->begin() + off, chunk->begin() + off + n)};
      RETURN_IF_ERROR(send(protocol::MakeFrame(piece, id, protocol::kFlagMore)));
      off += n;
    } while (off < chunk->size());
  }
}
}  // namespace

Result<ExecResult> AgentClient::Exec(const protocol::ExecStartRequest& request, const ExecIo& io,
                                     Deadline deadline) {
  deadline = Resolve(deadline);
  const uint32_t id = NextId();
  IdGuard guard(this, id);
  RETURN_IF_ERROR(SendFrame(protocol::MakeFrame(request, id), deadline));
  ExecResult result;
  result.exec_id = id;
  ASSIGN_OR_RETURN(Frame started, AwaitReply(id, MsgType::kExecStart, deadline));
  ASSIGN_OR_RETURN(auto reply, protocol::ExecStartReply::Decode(started.payload));
  result.pid = reply.pid;
  if (io.on_started) io.on_started(id, reply.pid);
  if (!started.has_more()) return result;  // background: no output, no exit
  if (request.stdin_streamed) {
    RETURN_IF_ERROR(StreamStdin(id, io, [&](const Frame& f) { return SendFrame(f, deadline); }));
  }
  for (;;) {
    ASSIGN_OR_RETURN(Frame f, Await(id, deadline));
    if (f.type == MsgType::kExecOutput && f.is_reply()) {
      ASSIGN_OR_RETURN(auto out, protocol::ExecOutputChunk::Decode(f.payload));
      if (io.on_output) {
        io.on_output(out.stream, out.data);
      } else {
        Bytes& dst = out.stream == protocol::OutputStream::kStdout ? result.stdout_data
                                                                  : result.stderr_data;
        dst.insert(dst.end(), out.data.begin(), out.data.end());
      }
      continue;
    }
    if (f.type == MsgType::kError) {
      ASSIGN_OR_RETURN(auto err, protocol::ErrorReply::Decode(f.payload));
      return err.ToStatus();
    }
    if (f.type != MsgType::kExecExit || !f.is_reply()) {
      return Status::DataLoss("unexpected " + protocol::MsgTypeName(f.type) + " during exec");
    }
    ASSIGN_OR_RETURN(auto exit, protocol::ExecExitReply::Decode(f.payload));
    result.exit_code = exit.exit_code;
    result.signal = exit.signal;
    result.timed_out = exit.timed_out;
    result.truncated = exit.truncated;
    return result;
  }
}

Status AgentClient::SignalExec(uint32_t exec_id, uint32_t signal, Deadline deadline) {
  return Call<protocol::EmptyMessageReply<MsgType::kExecSignal>>(
             protocol::ExecSignalRequest{exec_id, signal}, Resolve(deadline))
      .status();
}

Status AgentClient::WriteFile(const std::string& path, ByteSpan data, const WriteOptions& options,
                              Deadline deadline) {
  deadline = Resolve(deadline);
  RETURN_IF_ERROR(protocol::ValidatePath(path));
  const uint32_t id = NextId();
  IdGuard guard(this, id);
  uint64_t offset = 0;
  bool first = true;
  for (;;) {
    protocol::FileWriteChunk c;
    if (first) {
      c.path = path;
      c.mode = options.mode;
      c.atomic = options.atomic;
    }
    c.offset = offset;
    const size_t overhead = c.Encode().size();
    const size_t room = agent_.max_payload > overhead ? agent_.max_payload - overhead : 0;
    const size_t n = std::min<size_t>({protocol::kMaxChunk, room, data.size() - offset});
    c.data.assign(data.begin() + offset, data.begin() + offset + n);
    offset += n;
    const bool last = offset == data.size();
    RETURN_IF_ERROR(SendFrame(protocol::MakeFrame(c, id, last ? 0 : protocol::kFlagMore), deadline));
    first = false;
    if (last) break;
    std::lock_guard l(mu_);
    if (!pending_[id].empty()) break;  // the agent answered early: an error
  }
  ASSIGN_OR_RETURN(Frame f, AwaitReply(id, MsgType::kFileWrite, deadline));
  ASSIGN_OR_RETURN(auto reply, protocol::FileWriteReply::Decode(f.payload));
  if (reply.size != data.size()) {
    return Status::DataLoss("agent wrote " + std::to_string(reply.size) + " of " +
                            std::to_string(data.size()) + " bytes");
  }
  return Status::Ok();
}

Status AgentClient::ReadFileChunks(
    const std::string& path, uint64_t offset, uint64_t length,
    const std::function<Status(uint64_t offset, ByteSpan data)>& on_chunk, Deadline deadline) {
  deadline = Resolve(deadline);
  const uint32_t id = NextId();
  IdGuard guard(this, id);
  RETURN_IF_ERROR(SendFrame(protocol::MakeFrame(protocol::FileReadRequest{path, offset, length}, id),
                            deadline));
  uint64_t expect = offset;
  for (;;) {
    ASSIGN_OR_RETURN(Frame f, AwaitReply(id, MsgType::kFileRead, deadline));
    ASSIGN_OR_RETURN(auto chunk, protocol::FileReadChunk::Decode(f.payload));
    if (chunk.offset != expect) return Status::DataLoss("FILE_READ chunk out of order");
    expect += chunk.data.size();
    if (length != 0 && expect - offset > length) return Status::DataLoss("FILE_READ overran length");
    RETURN_IF_ERROR(on_chunk(chunk.offset, chunk.data));
    if (!f.has_more()) return Status::Ok();
  }
}

Result<Bytes> AgentClient::ReadFile(const std::string& path, Deadline deadline) {
  Bytes out;
  RETURN_IF_ERROR(ReadFileChunks(path, 0, 0,
                                 [&](uint64_t, ByteSpan d) {
                                   out.insert(out.end(), d.begin(), d.end());
                                   return Status::Ok();
                                 },
                                 deadline));
  return out;
}

Result<protocol::StatReply> AgentClient::Stat(const std::string& path, Deadline deadline) {
  return Call<protocol::StatReply>(protocol::StatRequest{path}, Resolve(deadline));
}

Result<std::vector<protocol::DirEntry>> AgentClient::List(const std::string& path,
                                                         Deadline deadline) {
  deadline = Resolve(deadline);
  const uint32_t id = NextId();
  IdGuard guard(this, id);
  RETURN_IF_ERROR(SendFrame(protocol::MakeFrame(protocol::ListRequest{path}, id), deadline));
  std::vector<protocol::DirEntry> entries;
  for (;;) {
    ASSIGN_OR_RETURN(Frame f, AwaitReply(id, MsgType::kList, deadline));
    ASSIGN_OR_RETURN(auto part, protocol::ListReply::Decode(f.payload));
    for (auto& e : part.entries) entries.push_back(std::move(e));
    if (!f.has_more()) return entries;
  }
}

Status AgentClient::Mkdir(const std::string& path, uint32_t mode, bool parents,
                          Deadline deadline) {
  return Call<protocol::EmptyMessageReply<MsgType::kMkdir>>(
             protocol::MkdirRequest{path, mode, parents}, Resolve(deadline))
      .status();
}

Status AgentClient::Remove(const std::string& path, bool recursive, Deadline deadline) {
  return Call<protocol::EmptyMessageReply<MsgType::kRemove>>(
             protocol::RemoveRequest{path, recursive}, Resolve(deadline))
      .status();
}

Status AgentClient::Chmod(const std::string& path, uint32_t mode, Deadline deadline) {
  return Call<protocol::EmptyMessageReply<MsgType::kChmod>>(protocol::ChmodRequest{path, mode},
                                                            Resolve(deadline))
      .status();
}

Result<protocol::IdentityReply> AgentClient::Identity(Deadline deadline) {
  return Call<protocol::IdentityReply>(protocol::IdentityRequest{}, Resolve(deadline));
}

Result<uint64_t> AgentClient::PostRestore(const protocol::PostRestoreRequest& request,
                                          Deadline deadline) {
  ASSIGN_OR_RETURN(auto reply, (Call<protocol::PostRestoreReply>(request, Resolve(deadline))));
  return reply.generation;
}

Status AgentClient::MemFill(uint64_t seed, uint64_t size, Deadline deadline) {
  ASSIGN_OR_RETURN(auto reply,
                   (Call<protocol::MemFillReply>(protocol::MemFillRequest{seed, size},
                                                 Resolve(deadline))));
  if (reply.size != size) return Status::DataLoss("MEM_FILL filled a different size");
  return Status::Ok();
}

Result<protocol::MemChecksumReply> AgentClient::MemChecksum(Deadline deadline) {
  return Call<protocol::MemChecksumReply>(protocol::MemChecksumRequest{}, Resolve(deadline));
}

Result<Bytes> AgentClient::ReadEntropy(uint32_t length, Deadline deadline) {
  ASSIGN_OR_RETURN(auto reply, (Call<protocol::EntropyReadReply>(
                                   protocol::EntropyReadRequest{length}, Resolve(deadline))));
  if (reply.data.size() != length) return Status::DataLoss("ENTROPY_READ returned a short read");
  return std::move(reply.data);
}

}  // namespace kubicle::guest::client
