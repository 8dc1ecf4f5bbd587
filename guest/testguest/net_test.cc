// The test guest's ARP and ICMP echo answers (net.cc): replies byte by byte,
// every refusal, and 20,000 mutated frames checked against a reference
// written separately here.
#include "guest/testguest/net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <cstdint>
#include <random>
#include <vector>

#include "noderuntime/network/guest_network.h"

namespace kubicle::guest::testguest {
namespace {

using Bytes = std::vector<uint8_t>;

const NetIdentity kMe = {{0x02, 0x6b, 0x75, 0x00, 0x00, 0x07}, {172, 16, 0, 2}};
const std::array<uint8_t, 6> kHostMac = {0x02, 0x6b, 0x75, 0x62, 0x00, 0x01};
const std::array<uint8_t, 4> kHostIp = {172, 16, 0, 1};

uint16_t Be16(const Bytes& b, size_t at) { return uint16_t(b[at] << 8 | b[at + 1]); }
void PutBe16(Bytes& b, size_t at, uint16_t v) {
  b[at] = uint8_t(v >> 8);
  b[at + 1] = uint8_t(v);
}
template <typename C>
void Put(Bytes& b, size_t at, const C& c) {
  std::copy(std::begin(c), std::end(c), b.begin() + at);
}

// Reference checksum, a plain sum of 16-bit words (RFC 1071 section 4.1).
uint16_t RefChecksum(const Bytes& b, size_t from, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i < n; i += 2) {
    sum += uint32_t(b[from + i]) << 8;
    if (i + 1 < n) sum += b[from + i + 1];
    sum = (sum & 0xffff) + (sum >> 16);
  }
  return uint16_t(~sum & 0xffff);
}

Bytes ArpRequestFrame() {
  Bytes f(42);
  std::fill(f.begin(), f.begin() + 6, 0xff);
  Put(f, 6, kHostMac);
  PutBe16(f, 12, 0x0806);
  PutBe16(f, 14, 1);
  PutBe16(f, 16, 0x0800);
  f[18] = 6, f[19] = 4;
  PutBe16(f, 20, 1);
  Put(f, 22, kHostMac);
  Put(f, 28, kHostIp);
  Put(f, 38, kMe.ip);  // target hardware address left zero
  return f;
}

// Recomputes the IPv4 header and ICMP checksums of an echo frame built by
// EchoRequestFrame (header length taken from the frame).
void FixChecksums(Bytes& f) {
  if (f.size() < 34) return;
  const size_t ihl = size_t(f[14] & 0x0f) * 4;
  const size_t total = Be16(f, 16);
  if (ihl < 20 || 14 + ihl > f.size()) return;
  PutBe16(f, 24, 0);
  PutBe16(f, 24, RefChecksum(f, 14, ihl));
  if (total < ihl + 4 || 14 + total > f.size()) return;
  PutBe16(f, 14 + ihl + 2, 0);
  PutBe16(f, 14 + ihl + 2, RefChecksum(f, 14 + ihl, total - ihl));
}

Bytes EchoRequestFrame(size_t data_len, size_t options = 0, size_t padding = 0) {
  const size_t ihl = 20 + options;
  Bytes f(14 + ihl + 8 + data_len + padding, 0);
  Put(f, 0, kMe.mac);
  Put(f, 6, kHostMac);
  PutBe16(f, 12, 0x0800);
  f[14] = uint8_t(0x40 | ihl / 4);
  PutBe16(f, 16, uint16_t(ihl + 8 + data_len));
  PutBe16(f, 18, 0x1234);  // identification
  PutBe16(f, 20, 0x4000);  // DF, as ping sets it
  f[22] = 64, f[23] = 1;
  Put(f, 26, kHostIp);
  Put(f, 30, kMe.ip);
  for (size_t i = 0; i < options; ++i) f[34 + i] = 1;  // NOP options
  const size_t icmp = 14 + ihl;
  f[icmp] = 8;
  PutBe16(f, icmp + 4, 0xbeef);
  PutBe16(f, icmp + 6, 7);
  for (size_t i = 0; i < data_len; ++i) f[icmp + 8 + i] = uint8_t(i * 7);
  FixChecksums(f);
  return f;
}

Bytes Answer(const Bytes& frame, uint32_t cap = 2048) {
  Bytes out(cap);
  uint32_t n = AnswerFrame(kMe, frame.data(), uint32_t(frame.size()), out.data(), cap);
  out.resize(n);
  return out;
}

bool Unicast(const Bytes& b, size_t at) {
  return (b[at] & 1) == 0 && !std::all_of(b.begin() + at, b.begin() + at + 6,
                                          [](uint8_t x) { return x == 0; });
}
bool Same(const Bytes& b, size_t at, const uint8_t* p, size_t n) {
  return std::equal(p, p + n, b.begin() + at);
}

// The reference: the reply a correct responder sends, written from the
// RFCs without the code under test (empty: no reply).
Bytes Reference(const Bytes& f) {
  if (f.size() < 14 || f.size() > 1514 || !Unicast(f, 6)) return {};
  const bool to_me = Same(f, 0, kMe.mac, 6);
  const bool broadcast = std::all_of(f.begin(), f.begin() + 6, [](uint8_t x) { return x == 0xff; });
  if (Be16(f, 12) == 0x0806) {
    if (!(to_me || broadcast) || f.size() < 42) return {};
    if (Be16(f, 14) != 1 || Be16(f, 16) != 0x0800 || f[18] != 6 || f[19] != 4 || Be16(f, 20) != 1)
      return {};
    if (!Same(f, 38, kMe.ip, 4) || !Unicast(f, 22)) return {};
    Bytes r(42);
    std::copy(f.begin() + 22, f.begin() + 28, r.begin());  // to the sender
    Put(r, 6, kMe.mac);
    PutBe16(r, 12, 0x0806);
    std::copy(f.begin() + 14, f.begin() + 20, r.begin() + 14);
    PutBe16(r, 20, 2);
    Put(r, 22, kMe.mac);
    Put(r, 28, kMe.ip);
    std::copy(f.begin() + 22, f.begin() + 32, r.begin() + 32);  // sender MAC and IP
    return r;
  }
  if (Be16(f, 12) != 0x0800 || !to_me || f.size() < 34 || f[14] >> 4 != 4) return {};
  const size_t ihl = size_t(f[14] & 0x0f) * 4, total = Be16(f, 16);
  if (ihl < 20 || total < ihl || 14 + total > f.size() || RefChecksum(f, 14, ihl) != 0) return {};
  if ((Be16(f, 20) & 0x3fff) != 0 || f[23] != 1 || !Same(f, 30, kMe.ip, 4)) return {};
  if (f[26] == 0 || f[26] == 127 || f[26] >= 224 || Same(f, 26, kMe.ip, 4)) return {};
  const size_t icmp = 14 + ihl, icmp_len = total - ihl;
  if (icmp_len < 8 || f[icmp] != 8 || f[icmp + 1] != 0 || RefChecksum(f, icmp, icmp_len) != 0)
    return {};
  Bytes r(34 + icmp_len, 0);
  std::copy(f.begin() + 6, f.begin() + 12, r.begin());
  Put(r, 6, kMe.mac);
  PutBe16(r, 12, 0x0800);
  r[14] = 0x45;
  PutBe16(r, 16, uint16_t(20 + icmp_len));
  std::copy(f.begin() + 18, f.begin() + 20, r.begin() + 18);
  r[22] = 64, r[23] = 1;
  Put(r, 26, kMe.ip);
  std::copy(f.begin() + 26, f.begin() + 30, r.begin() + 30);
  PutBe16(r, 24, RefChecksum(r, 14, 20));
  std::copy(f.begin() + icmp + 4, f.begin() + icmp + icmp_len, r.begin() + 38);
  PutBe16(r, 36, RefChecksum(r, 34, icmp_len));
  return r;
}

TEST(NetTest, ChecksumIsRfc1071s) {
  // RFC 1071 section 3's example: the sum is ddf2, so the checksum is 220d.
  const uint8_t even[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(InternetChecksum(even, sizeof(even)), 0x220d);
  const uint8_t odd[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7, 0x01};
  EXPECT_EQ(InternetChecksum(odd, sizeof(odd)), uint16_t(~0xdef2));
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    Bytes b(1 + rng() % 300);
    for (auto& x : b) x = uint8_t(rng());
    EXPECT_EQ(InternetChecksum(b.data(), uint32_t(b.size())), RefChecksum(b, 0, b.size()));
  }
}

TEST(NetTest, GuestAddressIsTheSandboxAddressPlan) {
  in_addr plan{};
  ASSERT_EQ(inet_pton(AF_INET, noderuntime::network::kGuestAddress, &plan), 1);
  EXPECT_EQ(std::memcmp(&plan, kGuestIpv4, 4), 0);
}

TEST(NetTest, AnswersAnArpRequestForItsAddress) {
  const Bytes reply = Answer(ArpRequestFrame());
  const Bytes want = {
      0x02, 0x6b, 0x75, 0x62, 0x00, 0x01, 0x02, 0x6b, 0x75, 0x00, 0x00, 0x07, 0x08, 0x06,  // eth
      0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x02,                                        // reply
      0x02, 0x6b, 0x75, 0x00, 0x00, 0x07, 172, 16, 0, 2,                               // us
      0x02, 0x6b, 0x75, 0x62, 0x00, 0x01, 172, 16, 0, 1};                              // them
  EXPECT_EQ(reply, want);
  // Sent to our MAC (a unicast re-check), and with Ethernet padding: the same.
  Bytes unicast = ArpRequestFrame();
  Put(unicast, 0, kMe.mac);
  unicast.resize(60, 0);
  EXPECT_EQ(Answer(unicast), want);
}

TEST(NetTest, RefusesArpThatIsNotARequestForUs) {
  auto with = [](size_t at, uint8_t v) {
    Bytes f = ArpRequestFrame();
    f[at] = v;
    return f;
  };
  EXPECT_TRUE(Answer(with(41, 3)).empty()) << "another address";
  EXPECT_TRUE(Answer(with(21, 2)).empty()) << "a reply, not a request";
  EXPECT_TRUE(Answer(with(15, 6)).empty()) << "not Ethernet hardware";
  EXPECT_TRUE(Answer(with(18, 8)).empty()) << "hardware address length";
  EXPECT_TRUE(Answer(with(22, 0x03)).empty()) << "multicast sender";
  EXPECT_TRUE(Answer(with(0, 0x03)).empty()) << "to another station";
  EXPECT_TRUE(Answer(with(6, 0x01)).empty()) << "from a multicast source";
}

TEST(NetTest, AnswersAnEchoRequestWithItsData) {
  const Bytes request = EchoRequestFrame(56);
  const Bytes reply = Answer(request);
  ASSERT_EQ(reply.size(), request.size());
  EXPECT_TRUE(Same(reply, 0, kHostMac.data(), 6));
  EXPECT_TRUE(Same(reply, 6, kMe.mac, 6));
  EXPECT_EQ(Be16(reply, 12), 0x0800);
  EXPECT_EQ(reply[14], 0x45);
  EXPECT_EQ(RefChecksum(reply, 14, 20), 0) << "IPv4 header checksum";
  EXPECT_TRUE(Same(reply, 26, kMe.ip, 4));
  EXPECT_TRUE(Same(reply, 30, kHostIp.data(), 4));
  EXPECT_EQ(reply[34], 0) << "echo reply";
  EXPECT_EQ(RefChecksum(reply, 34, reply.size() - 34), 0) << "ICMP checksum";
  EXPECT_EQ(Be16(reply, 38), 0xbeef);
  EXPECT_EQ(Be16(reply, 40), 7);
  EXPECT_TRUE(std::equal(request.begin() + 42, request.end(), reply.begin() + 42));
  EXPECT_EQ(reply, Reference(request));
}

TEST(NetTest, AnswersEchoWithIpOptionsAndEthernetPaddingWithoutEitherOne) {
  const Bytes request = EchoRequestFrame(0, 8, 12);
  const Bytes reply = Answer(request);
  ASSERT_EQ(reply.size(), 14u + 20 + 8) << "options dropped, padding not echoed";
  EXPECT_EQ(reply, Reference(request));
}

TEST(NetTest, RefusesEchoNotForUsOrNotWellFormed) {
  auto with = [](size_t at, uint8_t v, bool fix) {
    Bytes f = EchoRequestFrame(16);
    f[at] = v;
    if (fix) FixChecksums(f);
    return f;
  };
  EXPECT_TRUE(Answer(with(0, 0xff, true)).empty()) << "broadcast MAC";
  EXPECT_TRUE(Answer(with(5, 0x08, true)).empty()) << "another MAC";
  EXPECT_TRUE(Answer(with(33, 3, true)).empty()) << "another address";
  EXPECT_TRUE(Answer(with(26, 224, true)).empty()) << "multicast source";
  EXPECT_TRUE(Answer(with(26, 0, true)).empty()) << "source 0.x";
  EXPECT_TRUE(Answer(with(20, 0x20, true)).empty()) << "more fragments";
  EXPECT_TRUE(Answer(with(21, 0x01, true)).empty()) << "a fragment offset";
  EXPECT_TRUE(Answer(with(23, 6, true)).empty()) << "TCP";
  EXPECT_TRUE(Answer(with(34, 0, true)).empty()) << "an echo reply";
  EXPECT_TRUE(Answer(with(35, 1, true)).empty()) << "code 1";
  EXPECT_TRUE(Answer(with(14, 0x65, true)).empty()) << "IPv6 version";
  EXPECT_TRUE(Answer(with(14, 0x44, true)).empty()) << "header length 16";
  EXPECT_TRUE(Answer(with(29, 9, false)).empty()) << "bad header checksum";
  EXPECT_TRUE(Answer(with(50, 9, false)).empty()) << "bad ICMP checksum";
  EXPECT_TRUE(Answer(with(12, 0x86, true)).empty()) << "another EtherType";
  EXPECT_FALSE(Answer(with(29, 9, true)).empty()) << "the same fixed up is answered";
}

TEST(NetTest, EveryTruncationIsRefused) {
  for (const Bytes& whole : {ArpRequestFrame(), EchoRequestFrame(40, 4)}) {
    ASSERT_FALSE(Answer(whole).empty());
    for (size_t n = 0; n < whole.size(); ++n) {
      // Exactly n bytes on the heap: a read past them is a sanitizer finding.
      Bytes cut(whole.begin(), whole.begin() + n);
      EXPECT_TRUE(Answer(cut).empty()) << n << " of " << whole.size() << " bytes";
    }
  }
  Bytes out(64);
  EXPECT_EQ(AnswerFrame(kMe, nullptr, 0, out.data(), 64), 0u);
}

TEST(NetTest, AReplyThatDoesNotFitIsNotWritten) {
  const Bytes request = EchoRequestFrame(100);
  Bytes out(request.size() + 16, 0xa5);
  EXPECT_EQ(AnswerFrame(kMe, request.data(), uint32_t(request.size()), out.data(),
                        uint32_t(request.size() - 1)),
            0u);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t x) { return x == 0xa5; }));
  Bytes arp_out(41, 0xa5);
  const Bytes arp = ArpRequestFrame();
  EXPECT_EQ(AnswerFrame(kMe, arp.data(), uint32_t(arp.size()), arp_out.data(), 41), 0u);
  // Over the MTU: not answered even with room.
  const Bytes jumbo = EchoRequestFrame(1514 - 42 + 1);
  EXPECT_TRUE(Answer(jumbo, 4096).empty());
  EXPECT_FALSE(Answer(EchoRequestFrame(1514 - 42), 4096).empty());
}

// 20,000 frames, each a valid request with 1-4 random mutations (bytes
// changed, lengths cut or grown, header fields set to edge values; half of
// them with checksums fixed so the mutation reaches the inner layers), must
// be answered exactly as the reference answers them.
TEST(NetTest, RandomlyMutatedFramesAreAnsweredExactlyAsTheReferenceDoes) {
  std::mt19937 rng(20261205);
  const std::vector<Bytes> seeds = {ArpRequestFrame(), EchoRequestFrame(56),
                                    EchoRequestFrame(0, 4, 6), EchoRequestFrame(1, 0, 1)};
  const size_t kEdges[] = {0, 6, 12, 13, 14, 15, 16, 17, 20, 21, 23, 26, 30, 34, 35, 38, 41};
  int answered = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    Bytes f = seeds[rng() % seeds.size()];
    const int mutations = 1 + int(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      switch (rng() % 6) {
        case 0: if (!f.empty()) f[rng() % f.size()] = uint8_t(rng()); break;
        case 1: if (!f.empty()) f[rng() % f.size()] ^= uint8_t(1u << (rng() % 8)); break;
        case 2: f.resize(rng() % (f.size() + 1)); break;
        case 3: f.resize(f.size() + rng() % 64, uint8_t(rng())); break;
        case 4: {
          const size_t at = kEdges[rng() % std::size(kEdges)];
          const uint8_t values[] = {0, 1, 0x7f, 0x80, 0xff, uint8_t(rng())};
          if (at < f.size()) f[at] = values[rng() % std::size(values)];
          break;
        }
        case 5: if (f.size() > 17) PutBe16(f, 16, uint16_t(rng() % (f.size() + 8))); break;
      }
    }
    if (rng() % 2 == 0) FixChecksums(f);
    const Bytes reply = Answer(f);
    ASSERT_EQ(reply, Reference(f)) << "frame " << i << " of " << f.size() << " bytes";
    reply.empty() ? ++refused : ++answered;
  }
  // Both sides were reached, or the comparison proved little.
  EXPECT_GT(answered, 1000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace kubicle::guest::testguest
