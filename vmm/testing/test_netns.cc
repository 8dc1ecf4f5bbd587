#include "vmm/testing/test_netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "noderuntime/network/guest_network.h"

namespace kubicle::vmm::testing {

namespace {

namespace plan = noderuntime::network;
using namespace std::chrono_literals;

// Runs fn on a thread of its own that first enters (ns valid) or creates
// (ns invalid) a network namespace: setns and unshare change only the
// calling thread, so this process's other threads never move.
Status InNamespace(int ns, const std::function<Status()>& fn) {
  Status out;
  std::thread([&] {
    if (ns >= 0 ? ::setns(ns, CLONE_NEWNET) != 0 : ::unshare(CLONE_NEWNET) != 0) {
      out = Status::FromErrno(ns >= 0 ? "setns into the test namespace" : "unshare(CLONE_NEWNET)");
      return;
    }
    out = fn();
  }).join();
  return out;
}

ifreq Named(const char* name) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  return ifr;
}

Status Ioctl(int fd, unsigned long request, ifreq& ifr, const char* what) {
  if (::ioctl(fd, request, &ifr) != 0) return Status::FromErrno(what + std::string(" on ") + ifr.ifr_name);
  return Status::Ok();
}

Status SetUp(int sock, const char* name) {
  ifreq ifr = Named(name);
  RETURN_IF_ERROR(Ioctl(sock, SIOCGIFFLAGS, ifr, "SIOCGIFFLAGS"));
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  return Ioctl(sock, SIOCSIFFLAGS, ifr, "SIOCSIFFLAGS");
}

Status SetIpv4(int sock, unsigned long request, const char* name, const char* address) {
  ifreq ifr = Named(name);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address, &sin.sin_addr) != 1)
    return Status::InvalidArgument(std::string("bad IPv4 address ") + address);
  std::memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
  return Ioctl(sock, request, ifr, "setting an IPv4 address");
}

Result<std::array<uint8_t, 6>> ParseMac(const char* text) {
  std::array<uint8_t, 6> mac{};
  unsigned v[6];
  char tail;
  if (std::sscanf(text, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
    return Status::InvalidArgument(std::string("bad MAC ") + text);
  for (int i = 0; i < 6; ++i) mac[i] = static_cast<uint8_t>(v[i]);
  return mac;
}

// IPv6 off on the TAP: the address plan is IPv4 only, and with it on the
// kernel sends router solicitations, MLD reports and DAD probes to the guest
// whenever a VMM attaches (carrier up), noise in tests and benchmarks.
// /proc/sys/net belongs to the namespace of the thread that opens it.
Status DisableIpv6(const char* name) {
  const std::string path = std::string("/proc/sys/net/ipv6/conf/") + name + "/disable_ipv6";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) {
    // A kernel without IPv6 sends none of it either.
    return errno == ENOENT ? Status::Ok() : Status::FromErrno("open " + path);
  }
  if (::write(fd.get(), "1", 1) != 1) return Status::FromErrno("write " + path);
  return Status::Ok();
}

// Inside the new namespace: lo up, then tap0 made persistent (as the node
// makes it, so it outlives this fd), given the gateway's MAC and address,
// IPv6 off, up.
Status MakeTap() {
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Status::FromErrno("socket");
  RETURN_IF_ERROR(SetUp(sock.get(), "lo"));
  UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!tun.valid()) return Status::FromErrno("open /dev/net/tun");
  ifreq ifr = Named(plan::kTapName);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  RETURN_IF_ERROR(Ioctl(tun.get(), TUNSETIFF, ifr, "TUNSETIFF"));
  if (::ioctl(tun.get(), TUNSETPERSIST, 1) != 0) return Status::FromErrno("TUNSETPERSIST");
  ASSIGN_OR_RETURN(auto gateway_mac, ParseMac(plan::kGatewayMac));
  ifr = Named(plan::kTapName);
  ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
  std::memcpy(ifr.ifr_hwaddr.sa_data, gateway_mac.data(), 6);
  RETURN_IF_ERROR(Ioctl(sock.get(), SIOCSIFHWADDR, ifr, "SIOCSIFHWADDR"));
  RETURN_IF_ERROR(SetIpv4(sock.get(), SIOCSIFADDR, plan::kTapName, plan::kGatewayAddress));
  // A /30 (kGuestPrefixLength): the gateway and the guest only.
  static_assert(plan::kGuestPrefixLength == 30);
  RETURN_IF_ERROR(SetIpv4(sock.get(), SIOCSIFNETMASK, plan::kTapName, "255.255.255.252"));
  RETURN_IF_ERROR(DisableIpv6(plan::kTapName));
  return SetUp(sock.get(), plan::kTapName);
}

uint16_t Checksum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i < n; i += 2) sum += uint32_t(p[i]) << 8 | (i + 1 < n ? p[i + 1] : 0);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// One echo request: type 8, id, sequence, a payload naming both.
std::vector<uint8_t> EchoRequest(uint16_t id, uint16_t seq) {
  std::vector<uint8_t> m(8 + 32);
  m[0] = ICMP_ECHO;
  m[4] = uint8_t(id >> 8), m[5] = uint8_t(id);
  m[6] = uint8_t(seq >> 8), m[7] = uint8_t(seq);
  for (size_t i = 8; i < m.size(); ++i) m[i] = uint8_t(i ^ id ^ seq);
  const uint16_t sum = Checksum(m.data(), m.size());
  m[2] = uint8_t(sum >> 8), m[3] = uint8_t(sum);
  return m;
}

// Whether `packet` (a raw socket's read: IPv4 header, then ICMP) is the
// echo reply to one of our requests from `from`, carrying our payload back.
bool IsOurReply(const uint8_t* packet, size_t n, in_addr from, uint16_t id, uint16_t last_seq) {
  if (n < 20 || (packet[0] >> 4) != 4) return false;
  const size_t ihl = size_t(packet[0] & 0x0f) * 4;
  if (ihl < 20 || n < ihl + 8 || std::memcmp(packet + 12, &from, 4) != 0) return false;
  const uint8_t* icmp = packet + ihl;
  const uint16_t seq = uint16_t(icmp[6] << 8 | icmp[7]);
  if (icmp[0] != ICMP_ECHOREPLY || uint16_t(icmp[4] << 8 | icmp[5]) != id || seq > last_seq)
    return false;
  std::vector<uint8_t> want = EchoRequest(id, seq);
  return n - ihl == want.size() && Checksum(icmp, n - ihl) == 0 &&
         std::equal(want.begin() + 8, want.end(), icmp + 8);
}

Status PingHere(in_addr to, std::chrono::milliseconds timeout) {
  UniqueFd sock(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
  if (!sock.valid()) return Status::FromErrno("raw ICMP socket");
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_addr = to;
  const uint16_t id = static_cast<uint16_t>(::getpid() ^ ::gettid());
  const auto end = std::chrono::steady_clock::now() + timeout;
  uint16_t seq = 0;
  auto next_send = std::chrono::steady_clock::now();
  std::array<uint8_t, 2048> buf;
  for (;;) {
    auto now = std::chrono::steady_clock::now();
    if (now >= end) {
      return Status::DeadlineExceeded("no echo reply from " + std::string(::inet_ntoa(to)) +
                                      " in " + std::to_string(timeout.count()) + " ms (" +
                                      std::to_string(seq) + " requests)");
    }
    if (now >= next_send) {
      const std::vector<uint8_t> req = EchoRequest(id, ++seq);
      // ENOBUFS/EHOSTUNREACH while ARP is unanswered: try again next round.
      (void)::sendto(sock.get(), req.data(), req.size(), 0, reinterpret_cast<sockaddr*>(&dst),
                     sizeof(dst));
      next_send = now + 100ms;
    }
    const auto wait = std::min(next_send, end) - now;
    pollfd p{sock.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()) + 1);
    if (ready < 0 && errno != EINTR) return Status::FromErrno("poll");
    if (ready <= 0) continue;
    const ssize_t n = ::recv(sock.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0 && IsOurReply(buf.data(), size_t(n), to, id, seq)) return Status::Ok();
  }
}

Result<in_addr> Ipv4(const std::string& address) {
  in_addr out{};
  const std::string text = address.empty() ? plan::kGuestAddress : address;
  if (::inet_pton(AF_INET, text.c_str(), &out) != 1)
    return Status::InvalidArgument("bad IPv4 address " + text);
  return out;
}

}  // namespace

Result<std::unique_ptr<TestNetns>> TestNetns::Create() {
  UniqueFd ns;
  RETURN_IF_ERROR(InNamespace(-1, [&]() -> Status {
    ns.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!ns.valid()) return Status::FromErrno("open /proc/thread-self/ns/net");
    return MakeTap();
  }));
  return std::unique_ptr<TestNetns>(new TestNetns(std::move(ns)));
}

std::string TestNetns::path() const {
  return "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(ns_.get());
}

std::string TestNetns::NetFlag(const std::string& mac) const {
  return std::string("tap=") + plan::kTapName + ",mac=" + mac + ",netns=" + path();
}

control::NetAttachment TestNetns::Attachment(const std::string& mac) const {
  return {.tap = plan::kTapName, .mac = mac, .netns = path()};
}

Status TestNetns::Ping(std::chrono::milliseconds timeout, const std::string& address) const {
  ASSIGN_OR_RETURN(in_addr to, Ipv4(address));
  return InNamespace(ns_.get(), [&] { return PingHere(to, timeout); });
}

Result<std::string> TestNetns::NeighbourMac(const std::string& address) const {
  ASSIGN_OR_RETURN(in_addr ip, Ipv4(address));
  std::string mac;
  RETURN_IF_ERROR(InNamespace(ns_.get(), [&]() -> Status {
    UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) return Status::FromErrno("socket");
    arpreq req{};
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr = ip;
    std::memcpy(&req.arp_pa, &sin, sizeof(sin));
    std::strncpy(req.arp_dev, plan::kTapName, sizeof(req.arp_dev) - 1);
    if (::ioctl(sock.get(), SIOCGARP, &req) != 0) return Status::FromErrno("SIOCGARP");
    if ((req.arp_flags & ATF_COM) == 0) return Status::NotFound("no complete neighbour entry");
    char text[18];
    const auto* b = reinterpret_cast<const uint8_t*>(req.arp_ha.sa_data);
    std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3],
                  b[4], b[5]);
    mac = text;
    return Status::Ok();
  }));
  return mac;
}

}  // namespace kubicle::vmm::testing
