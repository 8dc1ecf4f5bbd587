// ConnectInNetns against a listener in a network namespace of the test's
// own: a thread unshares one, brings its loopback up and listens there.
// Needs root (CAP_SYS_ADMIN for unshare and setns): skips when unshare is
// refused for want of it (EPERM), fails on any other error.
#include "noderuntime/network/netns_connect.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

namespace kubicle::noderuntime::network {
namespace {

std::string ThreadNetns() { return std::filesystem::read_symlink("/proc/thread-self/ns/net"); }

// A thread living in a namespace of its own with a listener on its
// loopback; the namespace goes when the thread ends.
class NamespaceWithListener {
 public:
  NamespaceWithListener() {
    thread_ = std::thread([this] { Run(); });
    std::unique_lock l(mu_);
    cv_.wait(l, [&] { return ready_; });
  }
  ~NamespaceWithListener() {
    {
      std::lock_guard l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  const std::string& error() const { return error_; }
  // unshare(CLONE_NEWNET) was refused: the process lacks CAP_SYS_ADMIN.
  bool unprivileged() const { return unprivileged_; }
  const std::string& path() const { return path_; }
  uint16_t port() const { return port_; }
  int listener() const { return listener_.get(); }

 private:
  void Run() {
    Setup();
    std::unique_lock l(mu_);
    ready_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return done_; });
    listener_.reset();
  }
  void Setup() {
    if (::unshare(CLONE_NEWNET) != 0) {
      unprivileged_ = errno == EPERM;
      error_ = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    // A new namespace's loopback is down.
    UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) {
      error_ = std::string("bringing lo up: ") + std::strerror(errno);
      return;
    }
    listener_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_.get(), 4) != 0 ||
        ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      error_ = std::string("listening: ") + std::strerror(errno);
      return;
    }
    port_ = ntohs(a.sin_port);
    path_ = "/proc/" + std::to_string(::getpid()) + "/task/" +
            std::to_string(::syscall(SYS_gettid)) + "/ns/net";
  }

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false, done_ = false, unprivileged_ = false;
  std::string error_, path_;
  uint16_t port_ = 0;
  UniqueFd listener_;
};

TEST(NetnsConnectTest, ReachesAListenerInsideTheNamespaceOnly) {
  const std::string before = ThreadNetns();
  NamespaceWithListener ns;
  if (ns.unprivileged()) GTEST_SKIP() << "needs root: " << ns.error();
  ASSERT_EQ(ns.error(), "");
  ASSERT_NE(ns.path(), "");

  auto fd = ConnectInNetns(ns.path(), "127.0.0.1", ns.port(), std::chrono::seconds(5));
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  UniqueFd peer(::accept4(ns.listener(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(peer.valid()) << std::strerror(errno);
  ASSERT_EQ(::write(fd->get(), "ping", 4), 4);
  char buf[8] = {};
  ASSERT_EQ(::read(peer.get(), buf, sizeof buf), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");

  // The caller never moved; the listener is not in the caller's namespace
  // (its loopback is another one), so a port nothing listens on inside
  // the namespace is refused there.
  EXPECT_EQ(ThreadNetns(), before);
  auto refused = ConnectInNetns(ns.path(), "127.0.0.1", static_cast<uint16_t>(ns.port() ^ 1),
                                std::chrono::seconds(5));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("127.0.0.1:"), std::string::npos);
  EXPECT_EQ(ThreadNetns(), before);
}

TEST(NetnsConnectTest, AMissingNamespaceIsNotFound) {
  auto fd = ConnectInNetns("/run/netns/kubicle-no-such-namespace", "127.0.0.1", 80,
                           std::chrono::seconds(1));
  EXPECT_EQ(fd.status().code(), StatusCode::kNotFound) << fd.status().ToString();
}

TEST(NetnsConnectTest, RefusesABadAddressOrPortZero) {
  EXPECT_EQ(ConnectTcp("172.16.0", 80, std::chrono::seconds(1)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectTcp("127.0.0.1", 0, std::chrono::seconds(1)).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubicle::noderuntime::network
