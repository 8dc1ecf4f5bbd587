// ControlServer: kubicle-vmm's control socket. A Unix stream socket speaking
// the control protocol (control_protocol.h): each request line is decoded
// into a typed control::Request, handed to the one handler, and its typed
// reply (or error) is sent back as one line.
//
// Runs on the VMM's event loop thread; the handler runs there too, one
// request at a time. Untrusted input rules: lines over kMaxLineBytes close
// the connection; requests that do not decode (malformed JSON, unknown
// commands, wrong types, bad CIDs, a newer protocol version) get an error
// reply without reaching the handler; at most kMaxClients connections are
// served at once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/event_loop.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "vmm/control_protocol.h"

namespace kubicle::vmm {

class ControlServer {
 public:
  // Returns the reply to a decoded request (of the request's reply type) or
  // an error, which is sent as {"ok": false, "error": Status::ToString()}.
  using Handler = std::function<Result<control::Reply>(const control::Request& request)>;
  static constexpr size_t kMaxLineBytes = control::kMaxRequestBytes;
  static constexpr size_t kMaxClients = 16;

  // Binds path (replacing a stale socket file) and starts accepting on loop;
  // every request goes to handler.
  static Result<std::unique_ptr<ControlServer>> Listen(const std::string& path, EventLoop* loop,
                                                       Handler handler);
  ~ControlServer();

  // Computes the response line (without newline) for one request line.
  std::string HandleLine(const std::string& line);
  const std::string& path() const { return path_; }

 private:
  struct Client {
    UniqueFd fd;
    std::string buffer;
  };
  ControlServer(std::string path, UniqueFd listener, EventLoop* loop, Handler handler)
      : path_(std::move(path)), listener_(std::move(listener)), loop_(loop),
        handler_(std::move(handler)) {}
  void Accept();
  void OnReadable(int fd);
  void Close(int fd);

  std::string path_;
  UniqueFd listener_;
  EventLoop* loop_;
  std::map<int, Client> clients_;
  Handler handler_;
};

}  // namespace kubicle::vmm
