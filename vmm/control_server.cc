#include "vmm/control_server.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

#include "common/log.h"

namespace kubicle::vmm {

Result<std::unique_ptr<ControlServer>> ControlServer::Listen(const std::string& path,
                                                             EventLoop* loop) {
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
  std::unique_ptr<ControlServer> server(new ControlServer(path, std::move(listener), loop));
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
  nlohmann::json request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  auto error = [](const std::string& msg) {
    return nlohmann::json{{"ok", false}, {"error", msg}}.dump();
  };
  if (request.is_discarded() || !request.is_object()) return error("request is not a JSON object");
  auto cmd = request.find("cmd");
  if (cmd == request.end() || !cmd->is_string()) return error("request has no string field 'cmd'");
  auto handler = handlers_.find(cmd->get<std::string>());
  if (handler == handlers_.end()) return error("unknown command '" + cmd->get<std::string>() + "'");
  Result<nlohmann::json> result = handler->second(request);
  if (!result.ok()) return error(result.status().ToString());
  nlohmann::json response = result->is_object() ? *result : nlohmann::json::object();
  response["ok"] = true;
  return response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kubicle::vmm
