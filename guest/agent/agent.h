// Agent: kubicle-agent's core. Accepts connections on its listeners (vsock
// and/or Unix), validates every frame header, and dispatches requests to the
// exec, file and system services. Implements the whole agent protocol
// (guest/protocol/messages.h): HELLO, PING, ECHO, EXEC_*, FILE_*, STAT, LIST,
// MKDIR, REMOVE, CHMOD, IDENTITY, POST_RESTORE, MEM_FILL, MEM_CHECKSUM,
// ENTROPY_READ.
//
// Contracts:
//  - Every request frame gets the replies its message defines, or exactly
//    one ERROR for its id; streams (FILE_WRITE, EXEC_STDIN) are answered once.
//    An ERROR ends its id: nothing follows it for that id, whether the
//    frame was refused for its header or its payload (files.h, exec.h).
//    A malformed frame never breaks the connection (only lost framing does,
//    see connection.h).
//  - Header rules: HELLO uses version 1, other frames the negotiated version;
//    requests carry a non-zero id, no reply flag, no unknown flag, and MORE
//    only on FILE_WRITE and EXEC_STDIN.
//  - Limits (connections, execs, open streams, buffers) are fixed constants,
//    never derived from lengths the peer chose.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "guest/agent/connection.h"
#include "guest/agent/exec.h"
#include "guest/agent/files.h"
#include "guest/agent/loop.h"
#include "guest/agent/system.h"

namespace kubicle::guest::agent {

inline constexpr const char* kAgentName = "kubicle-agent";
inline constexpr const char* kAgentVersion = "0.1.0";

struct AgentOptions {
  std::string unix_path;       // empty: no Unix listener
  bool vsock = true;
  uint32_t vsock_port = protocol::kAgentVsockPort;
  SystemOptions system;
  // The image's defaults for execs (image_defaults.h); empty: none.
  std::string image_config = kImageConfigPath;
};

class Agent final : public ConnectionSink {
 public:
  static constexpr size_t kMaxConnections = 64;

  explicit Agent(Loop* loop, AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Opens the listeners and the SIGCHLD signalfd. SIGCHLD must be blocked.
  Status Start();
  // Kills foreground execs and closes every connection (agent shutdown).
  void Shutdown();

  void OnFrame(Connection& c, protocol::Frame frame) override;
  void OnDrained(Connection& c) override;
  void OnClosed(Connection& c) override;

 private:
  Status Listen(UniqueFd fd, std::string what);
  void Accept(int listen_fd, const std::string& what);
  Status CheckHeader(const Connection& c, const protocol::Frame& f) const;
  // Answers a frame refused before dispatch. A frame of a stream (FILE_WRITE,
  // EXEC_STDIN) ends that stream with its one ERROR, so no later reply for
  // the id follows it.
  void Refuse(Connection& c, const protocol::Frame& f, const Status& why);
  void Dispatch(Connection& c, protocol::Frame& f);
  void Hello(Connection& c, const protocol::Frame& f);

  Loop* loop_;
  AgentOptions options_;
  std::vector<UniqueFd> listeners_;
  std::vector<Loop::Token> listen_tokens_;
  std::map<Connection*, std::unique_ptr<Connection>> connections_;
  ExecService execs_;
  FileService files_;
  SystemService system_;
};

}  // namespace kubicle::guest::agent
