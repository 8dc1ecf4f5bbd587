// ControlClient: the one client of a kubicle-vmm control socket
// (control_protocol.h), used by the node runtime, the test harness and the
// benchmarks alike.
//
// Each call connects to the Unix socket, sends one typed request, reads one
// reply line and closes: the VMM serves few clients and keeps no session, so
// nothing is shared between calls and a ControlClient may be used from any
// thread (it holds only the path).
//
// Contracts:
// - Every call is bounded by its timeout (connect, send and receive
//   together) and by kMaxReplyBytes; it never blocks past the deadline.
// - Errors: a path too long for a Unix socket is InvalidArgument; no socket
//   or a refused or dropped connection is Unavailable; no reply in time is
//   DeadlineExceeded; an oversized or malformed reply is DataLoss; an
//   {"ok": false} reply is FailedPrecondition "kubicle-vmm <cmd>: <error>".
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"
#include "vmm/control_protocol.h"

namespace kubicle::vmm::control {

class ControlClient {
 public:
  using Timeout = std::chrono::milliseconds;

  explicit ControlClient(std::string socket_path) : path_(std::move(socket_path)) {}

  Result<VmStatus> GetStatus(Timeout timeout) const { return Call(StatusRequest{}, timeout); }
  Result<VmStatus> Pause(Timeout timeout) const { return Call(PauseRequest{}, timeout); }
  Result<VmStatus> Resume(Timeout timeout) const { return Call(ResumeRequest{}, timeout); }
  Result<SnapshotReply> Snapshot(const SnapshotRequest& r, Timeout timeout) const {
    return Call(r, timeout);
  }
  Result<RestoreReply> Restore(const RestoreRequest& r, Timeout timeout) const {
    return Call(r, timeout);
  }
  Result<ForkReply> Fork(const ForkRequest& r, Timeout timeout) const { return Call(r, timeout); }
  Status Shutdown(Timeout timeout) const { return Call(ShutdownRequest{}, timeout).status(); }

  // Any request, with its typed reply.
  template <typename Req>
  Result<typename ReplyOf<Req>::type> Call(const Req& request, Timeout timeout) const {
    ASSIGN_OR_RETURN(std::string line, EncodeRequest(Request{request}));
    ASSIGN_OR_RETURN(std::string reply, RoundTrip(line, timeout, CommandName(Request{request})));
    return DecodeReply<Req>(reply);
  }

  // Wire level: sends line (a newline is appended) and returns the reply
  // line without its newline, undecoded. For tests of the server's own
  // validation, which must be able to send what EncodeRequest refuses.
  Result<std::string> RoundTrip(std::string_view line, Timeout timeout,
                                std::string_view what = "request") const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kubicle::vmm::control
