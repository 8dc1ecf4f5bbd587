// The test guest's network answers, without any hardware access: it answers
// ARP requests for its IPv4 address and ICMP echo requests sent to it, and
// nothing else. Enough for a host to see frames go both ways through
// virtio-net (docs/testguest.md, "Network").
//
// Every byte of a received frame comes from outside the guest, so each
// layer is parsed against the length the device reported: a frame that is
// short, malformed, fragmented, carries a bad checksum or is not addressed
// to us gets no answer. A reply is only ever sent back to a unicast
// address. The driver (arch/net_device.cc, or a host test) passes a frame
// without its virtio_net_hdr and gets the reply frame to send.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kubicle::guest::testguest {

inline constexpr uint32_t kEthHeaderSize = 14;
inline constexpr uint32_t kArpSize = 28;  // Ethernet/IPv4 ARP body
inline constexpr uint32_t kIpv4HeaderMin = 20;
inline constexpr uint32_t kIcmpHeaderSize = 8;
// The largest frame answered: a 1500-byte MTU plus the Ethernet header.
inline constexpr uint32_t kMaxFrameSize = 1514;
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;

// The guest address every sandbox uses inside its own namespace
// (noderuntime/network/guest_network.h; a host test checks they agree).
inline constexpr uint8_t kGuestIpv4[4] = {172, 16, 0, 2};

struct NetIdentity {
  uint8_t mac[6] = {};
  uint8_t ip[4] = {};
};

// Views into a received frame; pointers stay inside it.
struct EthFrame {
  const uint8_t* dst;
  const uint8_t* src;
  uint16_t ether_type;
  const uint8_t* payload;
  uint32_t payload_len;
};
struct ArpRequest {
  const uint8_t* sender_mac;
  const uint8_t* sender_ip;
  const uint8_t* target_ip;
};
struct Ipv4Packet {
  const uint8_t* src;
  const uint8_t* dst;
  uint8_t protocol;
  const uint8_t* payload;  // past the header and its options
  uint32_t payload_len;    // from total length, not from the frame
};
struct IcmpEcho {
  uint16_t id;
  uint16_t sequence;
  const uint8_t* data;
  uint32_t data_len;
};

// The Internet checksum (RFC 1071) over p[0..n), folded and complemented.
// A block that carries its own correct checksum sums to 0.
uint16_t InternetChecksum(const uint8_t* p, uint32_t n);

// True for a MAC that names one station (not multicast, not all-zero).
bool IsUnicastMac(const uint8_t* mac);

// Each parser returns false when its layer is malformed or truncated.
bool ParseEthernet(const uint8_t* frame, uint32_t len, EthFrame* out);
// ARP requests only (Ethernet hardware, IPv4 protocol, operation 1).
bool ParseArpRequest(const uint8_t* body, uint32_t len, ArpRequest* out);
// Unfragmented IPv4 with a good header checksum; the frame may be padded
// past the total length.
bool ParseIpv4(const uint8_t* packet, uint32_t len, Ipv4Packet* out);
// Echo requests (type 8, code 0) with a good checksum over the message.
bool ParseIcmpEchoRequest(const uint8_t* message, uint32_t len, IcmpEcho* out);

// The reply to `frame` (len bytes) written to out[0..cap): its length, or 0
// when the frame gets no answer or the reply would not fit. `out` must not
// overlap `frame`: the reply is written while the request is still read.
uint32_t AnswerFrame(const NetIdentity& me, const uint8_t* frame, uint32_t len, uint8_t* out,
                     uint32_t cap);

}  // namespace kubicle::guest::testguest
