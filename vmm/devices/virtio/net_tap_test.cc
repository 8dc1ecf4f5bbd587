// TapBackend against a real TAP, in a network namespace of its own made in
// a child process (so nothing here touches the host's interfaces). Needs
// CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_NET_RAW and /dev/net/tun: skips when a
// step is refused for want of them (EPERM, EACCES) or the device is missing
// (ENOENT, ENODEV); any other error fails.
#include "vmm/devices/virtio/net_tap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace kubicle::vmm::devices::virtio {
namespace {

constexpr char kTap[] = "kbltest0";

// Exit codes of the child: 0 passed, kNoPrivilege or kNoTun (skips), else
// the step that failed.
constexpr int kNoPrivilege = 77;
constexpr int kNoTun = 78;

// The exit code for a failed setup step: a skip only for want of privilege.
int SetupFailed(int step) { return errno == EPERM || errno == EACCES ? kNoPrivilege : step; }

int ChildMain() {
  if (::unshare(CLONE_NEWNET) != 0) return SetupFailed(20);
  // A persistent TAP, as the node will have made it.
  int maker = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (maker < 0) return errno == ENOENT || errno == ENODEV ? kNoTun : SetupFailed(21);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, kTap, IFNAMSIZ - 1);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  if (::ioctl(maker, TUNSETIFF, &ifr) < 0) return SetupFailed(22);
  if (::ioctl(maker, TUNSETPERSIST, 1) < 0) return SetupFailed(23);
  ::close(maker);
  if (TapBackend::Open("nosuchtap0").status().code() != StatusCode::kNotFound) return 2;
  auto tap = TapBackend::Open(kTap);
  if (!tap.ok()) return 3;
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifr.ifr_flags = IFF_UP;
  if (s < 0 || ::ioctl(s, SIOCSIFFLAGS, &ifr) < 0) return 4;
  int pk = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(0x88b5));  // local experimental
  if (pk < 0) return SetupFailed(24);
  sockaddr_ll at{};
  at.sll_family = AF_PACKET;
  at.sll_protocol = htons(0x88b5);
  at.sll_ifindex = static_cast<int>(::if_nametoindex(kTap));
  if (::bind(pk, reinterpret_cast<sockaddr*>(&at), sizeof(at)) < 0) return 5;

  std::vector<uint8_t> frame(60, 0);
  std::memset(frame.data(), 0xff, 6);                 // broadcast
  const uint8_t src[6] = {0x02, 0x4b, 0x42, 0, 0, 1};  // the guest
  std::memcpy(frame.data() + 6, src, 6);
  frame[12] = 0x88, frame[13] = 0xb5;
  for (size_t i = 14; i < frame.size(); ++i) frame[i] = static_cast<uint8_t>(i);
  // guest -> host: the backend's Send comes out of the TAP's host side.
  iovec iov[2] = {{frame.data(), 20}, {frame.data() + 20, frame.size() - 20}};
  if (!(*tap)->Send(iov).ok()) return 6;
  pollfd p{pk, POLLIN, 0};
  if (::poll(&p, 1, 2000) != 1) return 7;
  std::vector<uint8_t> got(2000);
  ssize_t n = ::recv(pk, got.data(), got.size(), 0);
  if (n != static_cast<ssize_t>(frame.size()) ||
      !std::equal(frame.begin(), frame.end(), got.begin()))
    return 8;
  // host -> guest: a frame sent on the interface is read by Receive.
  frame[0] = 0x02;  // to the guest's MAC
  std::memcpy(frame.data(), src, 6);
  if (::send(pk, frame.data(), frame.size(), 0) != static_cast<ssize_t>(frame.size())) return 9;
  p = {(*tap)->fd(), POLLIN, 0};
  for (int tries = 0; tries < 50; ++tries) {  // the kernel may send its own frames first
    if (::poll(&p, 1, 2000) != 1) return 10;
    auto r = (*tap)->Receive(got);
    if (!r.ok()) return 11;
    if (*r == frame.size() && std::equal(frame.begin(), frame.end(), got.begin())) {
      auto none = (*tap)->Receive(got);  // non-blocking: nothing more is 0
      return none.ok() ? 0 : 12;
    }
  }
  return 13;
}

TEST(TapBackendTest, FramesBothWaysThroughARealTapInAPrivateNetns) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(ChildMain());
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == kNoPrivilege) GTEST_SKIP() << "needs CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_NET_RAW";
  if (WEXITSTATUS(status) == kNoTun) GTEST_SKIP() << "/dev/net/tun is absent";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed at step " << WEXITSTATUS(status);
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
