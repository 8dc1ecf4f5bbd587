// The Firecracker-style vsock UDS handshake: connect to the VM's Unix socket,
// send "CONNECT <port>\n", expect "OK <hostport>\n".
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "guest/client/agent_client.h"
#include "guest/client/socket_util.h"

namespace kubicle::guest::client {

namespace {
// Reads one '\n'-terminated line byte by byte so nothing after it (the agent
// protocol) is consumed. Lines are short; the byte-wise reads are cheap.
Result<std::string> ReadLine(int fd, size_t max_len, Deadline deadline) {
  std::string line;
  for (;;) {
    RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline).WithContext("vsock handshake"));
    char c;
    const ssize_t n = ::recv(fd, &c, 1, 0);
    if (n == 0) {
      return Status::Unavailable("vsock handshake: connection closed after CONNECT (" +
                                 (line.empty() ? std::string("no answer") : "got '" + line + "'") +
                                 "); is the guest listening on the port?");
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Status::FromErrno("vsock handshake: recv");
    }
    if (c == '\n') return line;
    if (line.size() == max_len) return Status::DataLoss("vsock handshake: answer line too long");
    line.push_back(c);
  }
}
}  // namespace

Result<UniqueFd> ConnectVsockUds(const std::string& uds_path, uint32_t port, Deadline deadline) {
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnixSocket(uds_path, deadline));
  const std::string cmd = "CONNECT " + std::to_string(port) + "\n";
  RETURN_IF_ERROR(SendAll(fd.get(), ByteSpan(reinterpret_cast<const uint8_t*>(cmd.data()),
                                             cmd.size()),
                          deadline)
                      .WithContext("vsock handshake"));
  ASSIGN_OR_RETURN(std::string line, ReadLine(fd.get(), 64, deadline));
  if (line.rfind("OK ", 0) != 0 || line.size() == 3 ||
      line.find_first_not_of("0123456789", 3) != std::string::npos) {
    return Status::DataLoss("vsock handshake: expected 'OK <port>', got '" + line + "'");
  }
  return fd;
}

}  // namespace kubicle::guest::client
