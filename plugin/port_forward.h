// PortForward: `kubectl kubicle port-forward`'s engine. A listener on this
// machine whose every connection is relayed to a port stream of one
// Sandbox (docs/api.md, "Ports"): a connection to its node's data plane,
// TLS verified against the node's CA when the Lease publishes one, the
// upgrade with the Sandbox's token, then bytes both ways
// (noderuntime/api/http_relay.h).
//
// Contracts:
//  - Each local connection gets a stream of its own, opened when it is
//    accepted (on a short-lived thread: connecting blocks). A stream the
//    node refuses closes that connection; the node's message goes to
//    `on_error` (which must be thread-safe).
//  - The node's answer head is read with a 16 KiB cap and its error body
//    with 64 KiB.
//  - Destroying it stops listening, closes every relayed connection and
//    joins its threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "plugin/sandbox_access.h"

namespace kubicle::plugin {

// "LOCAL:REMOTE", "PORT" (the same on both sides) or ":REMOTE" (any free
// local port: LOCAL 0), each port strictly 1..65535.
struct PortPair {
  uint16_t local = 0;
  uint16_t remote = 0;
};
Result<PortPair> ParsePortPair(const std::string& text);

class PortForward {
 public:
  using OnError = std::function<void(const std::string& message)>;

  // Listens on `address`:`local_port` (0 picks one: see local_port()).
  static Result<std::unique_ptr<PortForward>> Start(DataPlane dp, uint16_t remote_port,
                                                   const std::string& address, uint16_t local_port,
                                                   OnError on_error);
  ~PortForward();
  PortForward(const PortForward&) = delete;
  PortForward& operator=(const PortForward&) = delete;

  uint16_t local_port() const;

  class Impl;

 private:
  explicit PortForward(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace kubicle::plugin
