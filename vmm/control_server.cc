#include "vmm/control_server.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

#include "common/log.h"

namespace kubicle::vmm {

Result<std::unique_ptr<ControlServer>> ControlServer::Listen(const std::string& path,
                                                             EventLoop* loop, Handler handler) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path))
    return Status::InvalidArgument("control socket path too long: " + path);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::FromErrno("control socket");
  UniqueFd listener(fd);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0)
    return Status::FromErrno("bind " + path);
  if (::listen(fd, 16) < 0) return Status::FromErrno("listen " + path);
  std::unique_ptr<ControlServer> server(
      new ControlServer(path, std::move(listener), loop, std::move(handler)));
  ControlServer* raw = server.get();
  RETURN_IF_ERROR(loop->Add(fd, [raw](uint32_t) { raw->Accept(); }));
  return server;
}

ControlServer::~ControlServer() {
  for (auto& [fd, client] : clients_) (void)loop_->Remove(fd);
  clients_.clear();
  if (listener_) {
    (void)loop_->Remove(listener_.get());
    ::unlink(path_.c_str());
  }
}

void ControlServer::Accept() {
  int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  UniqueFd client(fd);
  if (clients_.size() >= kMaxClients) {
    log::Warn("control connection refused", {{"reason", "too many clients"}});
    return;
  }
  if (!loop_->Add(fd, [this, fd](uint32_t) { OnReadable(fd); }).ok()) return;
  clients_[fd] = Client{std::move(client), {}};
}

void ControlServer::Close(int fd) {
  (void)loop_->Remove(fd);
  clients_.erase(fd);
}

void ControlServer::OnReadable(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return Close(fd);
  if (n < 0) return;
  std::string& pending = it->second.buffer;
  pending.append(buf, static_cast<size_t>(n));
  size_t nl;
  while ((nl = pending.find('\n')) != std::string::npos) {
    std::string response = HandleLine(pending.substr(0, nl)) + "\n";
    pending.erase(0, nl + 1);
    // Responses are small; a client that does not read them loses its connection.
    if (::send(fd, response.data(), response.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(response.size()))
      return Close(fd);
    if (clients_.find(fd) == clients_.end()) return;  // a handler closed us (shutdown)
  }
  if (pending.size() > kMaxLineBytes) {
    log::Warn("control connection closed", {{"reason", "request line too long"}});
    Close(fd);
  }
}

std::string ControlServer::HandleLine(const std::string& line) {
  // A request that does not decode never reaches the handler; its error is
  // the bare reason (there is no command to name).
  Result<control::Request> request = control::DecodeRequest(line);
  if (!request.ok()) return control::EncodeError(request.status().message());
  Result<control::Reply> reply = handler_(*request);
  if (!reply.ok()) return control::EncodeError(reply.status().ToString());
  return control::EncodeReply(*reply);
}

}  // namespace kubicle::vmm
