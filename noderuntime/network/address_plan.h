// AddressPlan: the node side of every sandbox's addresses. The node's
// sandbox CIDR (--sandbox-network-cidr) is cut into /30 slots; slot N's
// veth pair joins the host (first usable address) and the sandbox
// namespace (second). The guest itself always has guest_network.h's
// address: these are what the namespace translates it to.
//
// /30 rather than /31: every tool reads a /30 right, and a /16 still gives
// 16,384 slots, thirty times the default sandbox capacity (docs/network.md).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "noderuntime/network/ipv4.h"

namespace kubicle::noderuntime::network {

struct SlotAddresses {
  static constexpr int kPrefix = 30;
  Ipv4 host;     // the host end of the veth: the namespace's default gateway
  Ipv4 sandbox;  // the namespace end: what the guest's traffic leaves as
};

class AddressPlan {
 public:
  // The block must hold at least 4 slots (/28) and be at most a /8 (a
  // wider one is almost surely a typo for something else).
  static Result<AddressPlan> For(Cidr cidr);

  const Cidr& cidr() const { return cidr_; }
  uint32_t slots() const { return uint32_t(cidr_.size() / 4); }
  // Requires slot < slots().
  SlotAddresses Of(uint32_t slot) const {
    const uint32_t base = cidr_.base.value + slot * 4;
    return {Ipv4{base + 1}, Ipv4{base + 2}};
  }

 private:
  explicit AddressPlan(Cidr cidr) : cidr_(cidr) {}
  Cidr cidr_;
};

}  // namespace kubicle::noderuntime::network
