// The address plan every sandbox shares inside its own network namespace
// (docs/network.md). Each sandbox's TAP lives in a namespace of its own, so
// every guest can use the same address, gateway and gateway MAC: a restored
// or forked clone keeps the configuration its snapshot was taken with and
// needs no re-addressing (Firecracker's layout for clones). What differs
// per sandbox is outside the guest's view: the namespace, the veth that
// leaves it and the address that veth translates to.
#pragma once

namespace kubicle::noderuntime::network {

// The TAP inside every sandbox namespace (the VMM attaches to it by name).
inline constexpr char kTapName[] = "tap0";
// The guest's address and its gateway (the TAP's address), a /30.
inline constexpr char kGuestAddress[] = "172.16.0.2";
inline constexpr char kGatewayAddress[] = "172.16.0.1";
inline constexpr int kGuestPrefixLength = 30;
// The TAP's own MAC, the same in every namespace: a clone's ARP entry for
// its gateway, taken over from the snapshot, stays right.
inline constexpr char kGatewayMac[] = "02:6b:75:62:00:01";

}  // namespace kubicle::noderuntime::network
