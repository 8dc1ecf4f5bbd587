// AgentClient: the host side of the agent protocol (docs/agent-protocol.md).
//
// Connects to a guest agent over (a) a Firecracker-style vsock Unix socket
// (`CONNECT <port>\n` / `OK <hostport>\n` handshake), (b) a plain Unix socket
// (the Linux agent run as a host process), or (c) an already connected fd,
// then performs HELLO and offers one method per agent operation.
//
// Contracts:
//  - Every call takes a Deadline; a default-constructed Deadline means "now +
//    ClientOptions::default_timeout". Expiry gives DeadlineExceeded; the
//    connection stays usable unless a frame was half-written.
//  - Thread-safe: several threads may issue calls at once; each call has its
//    own request id and replies are routed by id (whichever waiting thread
//    holds the socket reads and dispatches for the others).
//  - A broken connection (EOF, corrupt stream, half-written frame, agent-level
//    connection error) makes every later call fail with Unavailable carrying
//    the first cause. Agent ERROR replies come back as the Status they carry.
//  - The agent's advertised receive limit is honoured: bulk data is chunked
//    and an oversized single request fails locally with InvalidArgument.
//  - The agent is untrusted, so what it sends is bounded on the host
//    (ClientLimits): a frame above our receive limit breaks the connection;
//    collected exec output, whole-file reads and listings are capped; the
//    frames queued for one request are capped, and a request whose queue
//    stays full (its caller stopped consuming) is cut off. Host memory per
//    connection is O(limits x requests in flight), whatever the agent sends.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"

namespace kubicle::guest::client {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline DeadlineIn(std::chrono::milliseconds d) { return Clock::now() + d; }

using protocol::ByteSpan;
using protocol::Bytes;

// Host-side caps on what an (untrusted) agent may make us hold.
struct ClientLimits {
  // Collected (non-streamed) exec output kept per stream; beyond it the
  // output is read and discarded and ExecResult::truncated is set.
  uint64_t max_exec_output_per_stream = 16ull << 20;
  // ReadFile (whole file in memory): a larger file is ResourceExhausted;
  // ReadFileStream has no size limit.
  uint64_t max_read_file_bytes = 64ull << 20;
  // List across all its continuation frames: entries, and frame bytes
  // (headers included, so endless empty frames hit it too).
  uint64_t max_list_entries = 100000;
  uint64_t max_list_bytes = 32ull << 20;
  // Frames received for one request and not yet taken by its caller (frame
  // bytes). While one request's queue is full nobody reads the socket (the
  // agent is pushed back); if its caller takes nothing for `stall_timeout`
  // the request fails ResourceExhausted and its later frames are dropped,
  // so the other requests on the connection go on.
  uint64_t max_queued_bytes_per_request = 4ull << 20;
  std::chrono::milliseconds stall_timeout{10000};
};

struct ClientOptions {
  std::string name = "kubicle-client";
  std::string software_version = "0.1.0";
  std::chrono::milliseconds default_timeout{10000};
  uint32_t max_payload = protocol::kMaxPayload;  // our receive limit, sent in HELLO
  ClientLimits limits;
};

struct ExecIo {
  // Streamed output; when unset the output is collected into ExecResult.
  std::function<void(protocol::OutputStream, ByteSpan)> on_output;
  // Called once the agent started the process (exec_id is for SignalExec).
  std::function<void(uint32_t exec_id, uint32_t pid)> on_started;
  // For stdin_streamed requests: next chunk, or nullopt at EOF.
  std::function<std::optional<Bytes>()> next_stdin;
};

struct ExecResult {
  uint32_t exec_id = 0;
  uint32_t pid = 0;
  std::optional<int32_t> exit_code;  // unset for background execs and signals
  std::optional<uint32_t> signal;
  bool timed_out = false;
  // Output was cut: by the agent (output_limit) or, for collected output, by
  // the host (ClientLimits::max_exec_output_per_stream, or output_limit when
  // the agent ignored it).
  bool truncated = false;
  uint64_t discarded_bytes = 0;  // collected output the host read and dropped
  Bytes stdout_data;  // only when ExecIo::on_output is unset
  Bytes stderr_data;
};

// One piece of a streamed file read.
struct FileChunk {
  uint64_t offset = 0;
  ByteSpan data;                     // valid only during the callback
  std::optional<uint64_t> file_size; // the file's size, on the first chunk
};
// Returning an error stops the read; that error is the read's result.
using FileChunkFn = std::function<Status(const FileChunk&)>;

struct WriteOptions {
  uint32_t mode = 0644;
  bool atomic = true;
};

// Connects to a Firecracker-style vsock UDS and completes the CONNECT
// handshake. Unavailable when the socket is absent or refuses; DataLoss when
// the answer is not `OK <n>\n`.
Result<UniqueFd> ConnectVsockUds(const std::string& uds_path, uint32_t port, Deadline deadline);

class AgentClient {
 public:
  static Result<std::unique_ptr<AgentClient>> ConnectVsock(
      const std::string& uds_path, uint32_t port = protocol::kAgentVsockPort,
      ClientOptions options = {}, Deadline deadline = {});
  static Result<std::unique_ptr<AgentClient>> ConnectUnix(const std::string& path,
                                                          ClientOptions options = {},
                                                          Deadline deadline = {});
  // Takes a connected stream socket and performs HELLO over it.
  static Result<std::unique_ptr<AgentClient>> Adopt(UniqueFd fd, ClientOptions options = {},
                                                    Deadline deadline = {});

  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;
  ~AgentClient();

  // What the agent said in HELLO (name, version, capabilities, max_payload).
  const protocol::HelloReply& agent() const { return agent_; }

  Status Ping(Deadline deadline = {});
  Result<Bytes> Echo(ByteSpan data, Deadline deadline = {});

  Result<ExecResult> Exec(const protocol::ExecStartRequest& request, const ExecIo& io = {},
                          Deadline deadline = {});
  Status SignalExec(uint32_t exec_id, uint32_t signal, Deadline deadline = {});

  Status WriteFile(const std::string& path, ByteSpan data, const WriteOptions& options = {},
                   Deadline deadline = {});
  // The whole file in memory: ResourceExhausted for a file above
  // ClientLimits::max_read_file_bytes (use ReadFileStream).
  Result<Bytes> ReadFile(const std::string& path, Deadline deadline = {});
  // The whole file, chunk by chunk (each at most kMaxChunk), in order; on
  // success on_chunk ran at least once (an empty file: one empty chunk) and
  // the first call carries file_size. Backpressure: the agent is not read
  // for this request while on_chunk runs (frames read by other requests'
  // callers queue up to max_queued_bytes_per_request). `deadline` bounds
  // the whole read; besides, the agent must send each frame within
  // ClientOptions::default_timeout.
  Status ReadFileStream(const std::string& path, const FileChunkFn& on_chunk,
                        Deadline deadline = {});
  // Streams [offset, offset+length) (length 0 = to EOF) to on_chunk; an error
  // from on_chunk stops the read and is returned.
  Status ReadFileChunks(const std::string& path, uint64_t offset, uint64_t length,
                        const std::function<Status(uint64_t offset, ByteSpan data)>& on_chunk,
                        Deadline deadline = {});
  Result<protocol::StatReply> Stat(const std::string& path, Deadline deadline = {});
  // ResourceExhausted beyond ClientLimits::max_list_entries / max_list_bytes.
  Result<std::vector<protocol::DirEntry>> List(const std::string& path, Deadline deadline = {});
  Status Mkdir(const std::string& path, uint32_t mode = 0755, bool parents = false,
               Deadline deadline = {});
  Status Remove(const std::string& path, bool recursive = false, Deadline deadline = {});
  Status Chmod(const std::string& path, uint32_t mode, Deadline deadline = {});

  Result<protocol::IdentityReply> Identity(Deadline deadline = {});
  // Returns the generation the agent applied.
  Result<uint64_t> PostRestore(const protocol::PostRestoreRequest& request,
                               Deadline deadline = {});

  Status MemFill(uint64_t seed, uint64_t size, Deadline deadline = {});
  Result<protocol::MemChecksumReply> MemChecksum(Deadline deadline = {});
  Result<Bytes> ReadEntropy(uint32_t length, Deadline deadline = {});

  // Raw disks (test guest, capability "disk"). Disks are numbered in
  // DiskInfo order; data is whole 512-byte sectors, split into frames of at
  // most kMaxDiskSectors that fit both sides' receive limits. A multi-frame
  // DiskWrite that fails part-way returns the error with the earlier frames
  // written; with `flush` the last frame asks the guest to flush the disk.
  Result<std::vector<protocol::DiskDescription>> DiskInfo(Deadline deadline = {});
  Result<Bytes> DiskRead(uint32_t disk, uint64_t sector, uint32_t count, Deadline deadline = {});
  Status DiskWrite(uint32_t disk, uint64_t sector, ByteSpan data, bool flush = false,
                   Deadline deadline = {});

  // Low level, for tests and tools: sends `raw` (any bytes, possibly not a
  // valid frame) and returns the first frame the agent sends with `id`.
  Result<protocol::Frame> RawExchange(uint32_t id, ByteSpan raw, Deadline deadline = {});

  // The first cause when the connection is broken, OK otherwise.
  Status health() const;
  // Requests cut off so far because their caller stopped taking frames
  // (ClientLimits::stall_timeout).
  uint64_t requests_cut_off() const;

 private:
  AgentClient(UniqueFd fd, ClientOptions options);
  Status Hello(Deadline deadline);

  Deadline Resolve(Deadline d) const;
  uint32_t NextId();
  // Request id registration: frames for unregistered ids are dropped.
  void Register(uint32_t id);
  void Unregister(uint32_t id);
  class IdGuard {
   public:
    IdGuard(AgentClient* c, uint32_t id) : c_(c), id_(id) { c_->Register(id_); }
    ~IdGuard() { c_->Unregister(id_); }
    IdGuard(const IdGuard&) = delete;
    IdGuard& operator=(const IdGuard&) = delete;

   private:
    AgentClient* c_;
    uint32_t id_;
  };

  Status SendFrame(const protocol::Frame& frame, Deadline deadline);
  Status SendBytes(ByteSpan bytes, Deadline deadline);
  // Next frame addressed to `id` (registered).
  Result<protocol::Frame> Await(uint32_t id, Deadline deadline);
  // Reads from the socket once (up to the deadline) and routes complete frames.
  void ReadAndDispatch(Deadline deadline, std::unique_lock<std::mutex>& lock);
  // A request whose queue is full (requires mu_): nullptr when none. Sets
  // *cut_at to when it is cut off unless its caller takes a frame.
  struct Pending;
  Pending* FullQueue(Clock::time_point* cut_at);
  void Break(Status cause);  // requires mu_
  Status StreamRead(const std::string& path, uint64_t offset, uint64_t length,
                    const FileChunkFn& on_chunk, Deadline deadline);

  // Sends one request and decodes its single reply of type Reply.
  template <typename Reply, typename Request>
  Result<Reply> Call(const Request& request, Deadline deadline);
  Result<protocol::Frame> AwaitReply(uint32_t id, protocol::MsgType type, Deadline deadline);

  UniqueFd fd_;
  ClientOptions options_;
  protocol::HelloReply agent_;
  uint16_t version_ = protocol::kVersion1;
  std::atomic<uint32_t> next_id_{1};

  std::mutex write_mu_;
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool reader_active_ = false;
  protocol::FrameDecoder decoder_;
  struct Pending {
    std::deque<protocol::Frame> frames;
    uint64_t bytes = 0;            // frame bytes in `frames`
    Clock::time_point full_since;  // when `bytes` last reached the cap
    Clock::time_point last_take;   // when the caller last took a frame
    Status cut;                    // set: cut off, later frames dropped
  };
  std::map<uint32_t, Pending> pending_;
  uint64_t requests_cut_off_ = 0;
  Status broken_;
};

template <typename Reply, typename Request>
Result<Reply> AgentClient::Call(const Request& request, Deadline deadline) {
  const uint32_t id = NextId();
  IdGuard guard(this, id);
  RETURN_IF_ERROR(SendFrame(protocol::MakeFrame(request, id), deadline));
  ASSIGN_OR_RETURN(protocol::Frame f, AwaitReply(id, Reply::kType, deadline));
  if (f.has_more()) return Status::DataLoss("single-frame reply marked MORE");
  auto reply = Reply::Decode(f.payload);
  if (!reply.ok()) return Status::DataLoss("bad reply from agent: " + reply.status().message());
  return std::move(*reply);
}

}  // namespace kubicle::guest::client
