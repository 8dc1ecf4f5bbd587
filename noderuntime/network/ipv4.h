// IPv4 addresses and CIDR blocks as the node's network code needs them:
// strict parsing of what crosses a boundary (flags, spec.network, `ip`'s
// output), containment and overlap, and printing. Strict means one spelling
// per value: four decimal octets without leading zeros, a prefix length of
// 0..32 and no host bits set past it ("10.0.0.1/8" is refused, not masked),
// so a typo in a policy is an error instead of a silently wider rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubicle::noderuntime::network {

struct Ipv4 {
  uint32_t value = 0;  // host byte order
  bool operator==(const Ipv4&) const = default;
  auto operator<=>(const Ipv4&) const = default;
  std::string ToString() const;
};

struct Cidr {
  Ipv4 base;       // host bits are zero
  int prefix = 32;  // 0..32
  bool operator==(const Cidr&) const = default;
  auto operator<=>(const Cidr&) const = default;

  uint32_t mask() const { return prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix); }
  // Addresses in the block (2^(32-prefix)), as 64 bits so /0 fits.
  uint64_t size() const { return uint64_t{1} << (32 - prefix); }
  bool Contains(Ipv4 a) const { return (a.value & mask()) == base.value; }
  bool Overlaps(const Cidr& o) const;
  std::string ToString() const;  // "10.200.0.0/16"
};

// "a.b.c.d". InvalidArgument on anything else.
Result<Ipv4> ParseIpv4(std::string_view text);
// "a.b.c.d/len"; a bare address when `allow_bare` (then /32).
Result<Cidr> ParseCidr(std::string_view text, bool allow_bare = false);

}  // namespace kubicle::noderuntime::network
