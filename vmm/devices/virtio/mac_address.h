// MacAddress: a NIC's Ethernet address, its strict text form and the rule
// that a NIC's address is unicast and not zero. Header-only, so the command
// line parser (kubicle_vmm_control) checks --net without linking devices.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/status.h"

namespace kubicle::vmm::devices::virtio {

using MacAddress = std::array<uint8_t, 6>;

inline bool ValidNicMac(const MacAddress& mac) {
  return (mac[0] & 1) == 0 && mac != MacAddress{};
}

inline std::string FormatMac(const MacAddress& m) {
  char out[18];
  std::snprintf(out, sizeof(out), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return out;
}

// "aa:bb:cc:dd:ee:ff" (either case) to bytes; refuses anything else, and
// multicast or all-zero addresses, which no NIC may have.
inline Result<MacAddress> ParseMac(const std::string& text) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  MacAddress mac{};
  bool ok = text.size() == 17;
  for (size_t i = 0; ok && i < 6; ++i) {
    int hi = hex(text[3 * i]), lo = hex(text[3 * i + 1]);
    ok = hi >= 0 && lo >= 0 && (i == 5 || text[3 * i + 2] == ':');
    mac[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  if (!ok)
    return Status::InvalidArgument("'" + text + "' is not a MAC address (aa:bb:cc:dd:ee:ff)");
  if (!ValidNicMac(mac))
    return Status::InvalidArgument("MAC " + text +
                                   " is multicast or zero: a NIC needs a unicast one");
  return mac;
}

}  // namespace kubicle::vmm::devices::virtio
