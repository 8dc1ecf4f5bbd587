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

// Keeps collected output within the host's caps: per stream, and
// stdout+stderr within the request's output_limit (which a hostile agent
// may ignore). What does not fit is counted and dropped.
class OutputCollector {
 public:
  OutputCollector(uint64_t per_stream, uint64_t total) : per_stream_(per_stream), total_(total) {}
  void Add(protocol::OutputStream stream, ByteSpan data, ExecResult* r) {
    Bytes& dst = stream == protocol::OutputStream::kStdout ? r->stdout_data : r->stderr_data;
    const uint64_t kept = r->stdout_data.size() + r->stderr_data.size();
    uint64_t room = per_stream_ > dst.size() ? per_stream_ - dst.size() : 0;
    if (total_ != 0) room = std::min(room, total_ > kept ? total_ - kept : 0);
    const size_t n = size_t(std::min<uint64_t>(room, data.size()));
    dst.insert(dst.end(), data.begin(), data.begin() + n);
    if (n < data.size()) {
      r->truncated = true;
      r->discarded_bytes += data.size() - n;
    }
  }

 private:
  uint64_t per_stream_;
  uint64_t total_;  // 0: none
};

}  // namespace

Result<ExecResult> AgentClient::Exec(const protocol::ExecStartRequest& request, const ExecIo& io,
                                     Deadline deadline) {
  deadline = Resolve(deadline);
  const uint32_t id = NextId();
  IdGuard guard(this, id);
  const uint64_t per_stream = options_.limits.max_exec_output_per_stream;
  protocol::ExecStartRequest req = request;
  // Collected: an honest agent need not send what the host would drop.
  if (!io.on_output && req.output_limit == 0 && per_stream <= UINT64_MAX / 2) {
    req.output_limit = 2 * per_stream;
  }
  OutputCollector collect(per_stream, req.output_limit);
  RETURN_IF_ERROR(SendFrame(protocol::MakeFrame(req, id), deadline));
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
    auto next = Await(id, deadline);
    if (!next.ok()) {
      if (next.status().code() == StatusCode::kResourceExhausted) {
        // Cut off (the caller stopped taking output): stop the process too.
        (void)SignalExec(id, 9, DeadlineIn(std::chrono::seconds(1)));
      }
      return next.status();
    }
    Frame& f = *next;
    if (f.type == MsgType::kExecOutput && f.is_reply()) {
      ASSIGN_OR_RETURN(auto out, protocol::ExecOutputChunk::Decode(f.payload));
      if (io.on_output) {
        io.on_output(out.stream, out.data);
      } else {
        collect.Add(out.stream, out.data, &result);
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
    result.truncated = result.truncated || exit.truncated;
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
    if (!pending_[id].frames.empty()) break;  // the agent answered early: an error
  }
  ASSIGN_OR_RETURN(Frame f, AwaitReply(id, MsgType::kFileWrite, deadline));
  ASSIGN_OR_RETURN(auto reply, protocol::FileWriteReply::Decode(f.payload));
  if (reply.size != data.size()) {
    return Status::DataLoss("agent wrote " + std::to_string(reply.size) + " of " +
                            std::to_string(data.size()) + " bytes");
  }
  return Status::Ok();
}

Status AgentClient::StreamRead(const std::string& path, uint64_t offset, uint64_t length,
                               const FileChunkFn& on_chunk, Deadline deadline) {
  deadline = Resolve(deadline);
  const uint32_t id = NextId();
  IdGuard guard(this, id);
  RETURN_IF_ERROR(SendFrame(protocol::MakeFrame(protocol::FileReadRequest{path, offset, length}, id),
                            deadline));
  uint64_t expect = offset;
  for (;;) {
    // Each frame within default_timeout: a stalled agent does not hold a
    // long read for its whole deadline.
    const Deadline frame_deadline = std::min(deadline, Clock::now() + options_.default_timeout);
    ASSIGN_OR_RETURN(Frame f, AwaitReply(id, MsgType::kFileRead, frame_deadline));
    ASSIGN_OR_RETURN(auto chunk, protocol::FileReadChunk::Decode(f.payload));
    if (chunk.offset != expect) return Status::DataLoss("FILE_READ chunk out of order");
    expect += chunk.data.size();
    if (length != 0 && expect - offset > length) return Status::DataLoss("FILE_READ overran length");
    RETURN_IF_ERROR(on_chunk(FileChunk{chunk.offset, chunk.data, chunk.size}));
    if (!f.has_more()) return Status::Ok();
  }
}

Status AgentClient::ReadFileChunks(
    const std::string& path, uint64_t offset, uint64_t length,
    const std::function<Status(uint64_t offset, ByteSpan data)>& on_chunk, Deadline deadline) {
  return StreamRead(
      path, offset, length, [&](const FileChunk& c) { return on_chunk(c.offset, c.data); },
      deadline);
}

Status AgentClient::ReadFileStream(const std::string& path, const FileChunkFn& on_chunk,
                                   Deadline deadline) {
  return StreamRead(path, 0, 0, on_chunk, deadline);
}

Result<Bytes> AgentClient::ReadFile(const std::string& path, Deadline deadline) {
  const uint64_t cap = options_.limits.max_read_file_bytes;
  auto too_large = [&] {
    return Status::ResourceExhausted("file " + path + " is larger than the " +
                                     std::to_string(cap >> 20) +
                                     " MiB in-memory read limit; use the streamed read");
  };
  Bytes out;
  RETURN_IF_ERROR(StreamRead(path, 0, 0,
                             [&](const FileChunk& c) {
                               if (c.file_size && *c.file_size > cap) return too_large();
                               if (c.data.size() > cap - out.size()) return too_large();
                               out.insert(out.end(), c.data.begin(), c.data.end());
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
  const ClientLimits& lim = options_.limits;
  std::vector<protocol::DirEntry> entries;
  uint64_t bytes = 0;
  for (;;) {
    ASSIGN_OR_RETURN(Frame f, AwaitReply(id, MsgType::kList, deadline));
    bytes += protocol::kHeaderSize + f.payload.size();
    if (bytes > lim.max_list_bytes) {
      return Status::ResourceExhausted("listing of " + path + " exceeds the host's limit of " +
                                       std::to_string(lim.max_list_bytes) + " bytes");
    }
    ASSIGN_OR_RETURN(auto part, protocol::ListReply::Decode(f.payload));
    if (part.entries.size() > lim.max_list_entries - entries.size()) {
      return Status::ResourceExhausted("listing of " + path + " exceeds the host's limit of " +
                                       std::to_string(lim.max_list_entries) + " entries");
    }
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
