// TestNetns: a network namespace of a test's own, standing in for the node's
// per-sandbox one (noderuntime/network/guest_network.h): lo up and a
// persistent TAP `tap0` at the gateway address 172.16.0.1/30 with the
// gateway's MAC, up, for a kubicle-vmm to attach to with `--net ...,netns=`
// or a control::NetAttachment. Nothing touches the host's own namespace.
//
// The namespace is made by a short-lived thread that unshares, and is held
// by an fd of this process; other processes reach it through path()
// (/proc/<pid>/fd/<n>). The destructor closes that fd: the namespace and
// its TAP end once no VMM holds the TAP any more.
//
// Needs CAP_SYS_ADMIN and CAP_NET_ADMIN (root here) and /dev/net/tun:
// Create fails with PermissionDenied or NotFound without them, on which
// tests skip. No `ping` binary is needed: Ping sends ICMP echo from a raw
// socket opened by a thread that enters the namespace.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "vmm/control_protocol.h"

namespace kubicle::vmm::testing {

class TestNetns {
 public:
  static Result<std::unique_ptr<TestNetns>> Create();
  ~TestNetns() = default;
  TestNetns(const TestNetns&) = delete;
  TestNetns& operator=(const TestNetns&) = delete;

  // The namespace file, valid while this object lives.
  std::string path() const;
  // `--net` for a VMM with `mac`: "tap=tap0,mac=MAC,netns=PATH".
  std::string NetFlag(const std::string& mac) const;
  control::NetAttachment Attachment(const std::string& mac) const;

  // Sends an ICMP echo request to `address` (the guest's by default) every
  // 100 ms from inside the namespace until a matching reply comes back:
  // Ok then, DeadlineExceeded when none came within `timeout`. The first
  // request also makes the kernel ARP for the address, so an answer means
  // frames went both ways through the TAP.
  Status Ping(std::chrono::milliseconds timeout, const std::string& address = "") const;
  // The MAC the namespace's neighbour table holds for `address` (the
  // guest's by default), "aa:bb:cc:dd:ee:ff"; learned from the guest's ARP
  // reply, so it is the MAC the guest answered with. NotFound if none.
  Result<std::string> NeighbourMac(const std::string& address = "") const;

 private:
  explicit TestNetns(UniqueFd ns) : ns_(std::move(ns)) {}
  UniqueFd ns_;
};

}  // namespace kubicle::vmm::testing
