#include "guest/testguest/net.h"

#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest {

namespace {

constexpr uint8_t kBroadcastMac[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr uint16_t kArpHardwareEthernet = 1;
constexpr uint16_t kArpRequest = 1, kArpReply = 2;
constexpr uint8_t kIpProtocolIcmp = 1;
constexpr uint8_t kIcmpEchoReply = 0, kIcmpEchoRequest = 8;
constexpr uint8_t kReplyTtl = 64;

uint16_t LoadBe16(const uint8_t* p) { return uint16_t((p[0] << 8) | p[1]); }
void StoreBe16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}

// A source we may answer: one host, not "this network", loopback,
// multicast, reserved or the limited broadcast. A reply to anything else
// would go to many hosts or to none.
bool IsUnicastIpv4(const uint8_t* ip) { return ip[0] != 0 && ip[0] != 127 && ip[0] < 224; }

uint8_t* WriteEthernet(uint8_t* out, const uint8_t* dst, const uint8_t* src, uint16_t type) {
  Copy(out, dst, 6);
  Copy(out + 6, src, 6);
  StoreBe16(out + 12, type);
  return out + kEthHeaderSize;
}

uint32_t AnswerArp(const NetIdentity& me, const EthFrame& eth, uint8_t* out, uint32_t cap) {
  ArpRequest req;
  if (!ParseArpRequest(eth.payload, eth.payload_len, &req)) return 0;
  if (!Equal(req.target_ip, me.ip, 4) || !IsUnicastMac(req.sender_mac)) return 0;
  const uint32_t size = kEthHeaderSize + kArpSize;
  if (cap < size) return 0;
  uint8_t* arp = WriteEthernet(out, req.sender_mac, me.mac, kEtherTypeArp);
  StoreBe16(arp, kArpHardwareEthernet);
  StoreBe16(arp + 2, kEtherTypeIpv4);
  arp[4] = 6;
  arp[5] = 4;
  StoreBe16(arp + 6, kArpReply);
  Copy(arp + 8, me.mac, 6);
  Copy(arp + 14, me.ip, 4);
  Copy(arp + 18, req.sender_mac, 6);
  Copy(arp + 24, req.sender_ip, 4);
  return size;
}

uint32_t AnswerIpv4(const NetIdentity& me, const EthFrame& eth, uint8_t* out, uint32_t cap) {
  // An echo sent to a broadcast or multicast MAC is not ours to answer.
  if (!Equal(eth.dst, me.mac, 6)) return 0;
  Ipv4Packet ip;
  if (!ParseIpv4(eth.payload, eth.payload_len, &ip)) return 0;
  if (ip.protocol != kIpProtocolIcmp || !Equal(ip.dst, me.ip, 4) || !IsUnicastIpv4(ip.src) ||
      Equal(ip.src, me.ip, 4)) {
    return 0;
  }
  IcmpEcho echo;
  if (!ParseIcmpEchoRequest(ip.payload, ip.payload_len, &echo)) return 0;
  const uint32_t icmp_len = kIcmpHeaderSize + echo.data_len;
  const uint32_t size = kEthHeaderSize + kIpv4HeaderMin + icmp_len;
  if (size > cap) return 0;
  uint8_t* hdr = WriteEthernet(out, eth.src, me.mac, kEtherTypeIpv4);
  hdr[0] = 0x45;  // IPv4, no options (the request's are not echoed)
  hdr[1] = 0;
  StoreBe16(hdr + 2, uint16_t(kIpv4HeaderMin + icmp_len));
  Copy(hdr + 4, eth.payload + 4, 2);  // identification, as Linux echoes it
  StoreBe16(hdr + 6, 0);
  hdr[8] = kReplyTtl;
  hdr[9] = kIpProtocolIcmp;
  StoreBe16(hdr + 10, 0);
  Copy(hdr + 12, me.ip, 4);
  Copy(hdr + 16, ip.src, 4);
  StoreBe16(hdr + 10, InternetChecksum(hdr, kIpv4HeaderMin));
  uint8_t* icmp = hdr + kIpv4HeaderMin;
  icmp[0] = kIcmpEchoReply;
  icmp[1] = 0;
  StoreBe16(icmp + 2, 0);
  StoreBe16(icmp + 4, echo.id);
  StoreBe16(icmp + 6, echo.sequence);
  Copy(icmp + kIcmpHeaderSize, echo.data, echo.data_len);
  StoreBe16(icmp + 2, InternetChecksum(icmp, icmp_len));
  return size;
}

}  // namespace

uint16_t InternetChecksum(const uint8_t* p, uint32_t n) {
  uint64_t sum = 0;
  uint32_t i = 0;
  for (; i + 1 < n; i += 2) sum += LoadBe16(p + i);
  if (i < n) sum += uint32_t(p[i]) << 8;  // an odd last byte, padded with zero
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

bool IsUnicastMac(const uint8_t* mac) {
  static constexpr uint8_t kZero[6] = {};
  return (mac[0] & 1) == 0 && !Equal(mac, kZero, 6);
}

bool ParseEthernet(const uint8_t* frame, uint32_t len, EthFrame* out) {
  if (frame == nullptr || len < kEthHeaderSize) return false;
  *out = EthFrame{frame, frame + 6, LoadBe16(frame + 12), frame + kEthHeaderSize,
                  len - kEthHeaderSize};
  return true;
}

bool ParseArpRequest(const uint8_t* body, uint32_t len, ArpRequest* out) {
  if (len < kArpSize) return false;  // Ethernet padding may follow
  if (LoadBe16(body) != kArpHardwareEthernet || LoadBe16(body + 2) != kEtherTypeIpv4 ||
      body[4] != 6 || body[5] != 4 || LoadBe16(body + 6) != kArpRequest) {
    return false;
  }
  *out = ArpRequest{body + 8, body + 14, body + 24};
  return true;
}

bool ParseIpv4(const uint8_t* packet, uint32_t len, Ipv4Packet* out) {
  if (len < kIpv4HeaderMin || (packet[0] >> 4) != 4) return false;
  const uint32_t header_len = uint32_t(packet[0] & 0x0f) * 4;
  const uint32_t total_len = LoadBe16(packet + 2);
  if (header_len < kIpv4HeaderMin || total_len < header_len || total_len > len) return false;
  if (InternetChecksum(packet, header_len) != 0) return false;
  // More-fragments or an offset: a piece of a datagram we do not reassemble.
  if ((LoadBe16(packet + 6) & 0x3fff) != 0) return false;
  *out = Ipv4Packet{packet + 12, packet + 16, packet[9], packet + header_len,
                    total_len - header_len};
  return true;
}

bool ParseIcmpEchoRequest(const uint8_t* message, uint32_t len, IcmpEcho* out) {
  if (len < kIcmpHeaderSize || message[0] != kIcmpEchoRequest || message[1] != 0) return false;
  if (InternetChecksum(message, len) != 0) return false;
  *out = IcmpEcho{LoadBe16(message + 4), LoadBe16(message + 6), message + kIcmpHeaderSize,
                  len - kIcmpHeaderSize};
  return true;
}

uint32_t AnswerFrame(const NetIdentity& me, const uint8_t* frame, uint32_t len, uint8_t* out,
                     uint32_t cap) {
  if (len > kMaxFrameSize || out == nullptr) return 0;
  EthFrame eth;
  if (!ParseEthernet(frame, len, &eth) || !IsUnicastMac(eth.src)) return 0;
  if (!Equal(eth.dst, me.mac, 6) && !Equal(eth.dst, kBroadcastMac, 6)) return 0;
  switch (eth.ether_type) {
    case kEtherTypeArp: return AnswerArp(me, eth, out, cap);
    case kEtherTypeIpv4: return AnswerIpv4(me, eth, out, cap);
    default: return 0;
  }
}

}  // namespace kubicle::guest::testguest
