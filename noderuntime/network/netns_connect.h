// TCP connections to a guest: from the node's own namespace (ConnectTcp)
// or from inside a sandbox's network namespace (ConnectInNetns), where
// every guest has the same address (guest_network.h). The data plane's
// port streams (docs/api.md, "Ports") are opened with these.
//
// Contracts:
//  - The connect is bounded by `timeout` (DeadlineExceeded past it); a
//    refused or unreachable port is Unavailable, with the address in the
//    message. The returned descriptor is blocking, CLOEXEC, TCP_NODELAY.
//  - ConnectInNetns never moves the calling thread: a short-lived thread
//    of its own setns()es into the namespace, connects and exits; the
//    socket keeps the namespace it was made in. Needs CAP_SYS_ADMIN;
//    a missing namespace path is NotFound.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime::network {

inline constexpr std::chrono::milliseconds kGuestConnectTimeout{10000};

// `ipv4` is a dotted quad ("172.16.0.2"); InvalidArgument otherwise, or
// for port 0.
[[nodiscard]] Result<UniqueFd> ConnectTcp(const std::string& ipv4, uint16_t port,
                                          std::chrono::milliseconds timeout);

// ConnectTcp from inside the network namespace at `netns_path` (a
// /proc/PID/ns/net or a bind mount under /run/netns).
[[nodiscard]] Result<UniqueFd> ConnectInNetns(const std::string& netns_path,
                                              const std::string& ipv4, uint16_t port,
                                              std::chrono::milliseconds timeout);

}  // namespace kubicle::noderuntime::network
