// ControlServer: kubicle-vmm's control socket. A Unix stream socket speaking
// line-delimited JSON: each request is one line {"cmd": "<name>", ...} and gets
// one response line {"ok": true, ...} or {"ok": false, "error": "..."}.
//
// Runs on the VMM's event loop thread; handlers run there too, one at a time.
// Untrusted input rules: lines over kMaxLineBytes close the connection,
// malformed JSON and unknown commands get an error response, at most
// kMaxClients connections are served at once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/event_loop.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::vmm {

class ControlServer {
 public:
  // A handler returns the response fields (merged with "ok": true) or an error.
  using Handler = std::function<Result<nlohmann::json>(const nlohmann::json& request)>;
  static constexpr size_t kMaxLineBytes = 64 * 1024;
  static constexpr size_t kMaxClients = 16;

  // Binds path (replacing a stale socket file) and starts accepting on loop.
  static Result<std::unique_ptr<ControlServer>> Listen(const std::string& path, EventLoop* loop);
  ~ControlServer();

  void Register(const std::string& cmd, Handler handler) { handlers_[cmd] = std::move(handler); }
  // Computes the response line (without newline) for one request line.
  std::string HandleLine(const std::string& line);
  const std::string& path() const { return path_; }

 private:
  struct Client {
    UniqueFd fd;
    std::string buffer;
  };
  ControlServer(std::string path, UniqueFd listener, EventLoop* loop)
      : path_(std::move(path)), listener_(std::move(listener)), loop_(loop) {}
  void Accept();
  void OnReadable(int fd);
  void Close(int fd);

  std::string path_;
  UniqueFd listener_;
  EventLoop* loop_;
  std::map<int, Client> clients_;
  std::map<std::string, Handler> handlers_;
};

}  // namespace kubicle::vmm
