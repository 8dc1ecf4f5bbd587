// SandboxNetwork on real namespaces, veths and nftables (label kvm: it needs
// root, and skips without it). The test builds its own world and touches
// nothing of the host's network:
//   internet  a namespace with servers at 198.51.100.1 (:8080, :9090),
//             203.0.113.10 and the cloud metadata address 169.254.169.254
//   node      a namespace playing the host (LinuxNetSystem's host_netns),
//             198.51.100.2, default route to the internet, a server too
//   slot-N    the sandbox namespaces SandboxNetwork builds under node
//   guest-N   stands in for a VM: its eth0 is the peer of the slot's tap0
//             (a veth of that name instead of the TAP, so the slot's
//             rules see the guest's traffic come in on "tap0")
// Connections are TCP from inside the guest namespace; a refused one fails
// at once (the policy rejects), so no check waits on a timeout to pass.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "common/unique_fd.h"
#include "noderuntime/network/sandbox_network.h"

namespace kubicle::noderuntime::network {
namespace {

namespace fs = std::filesystem;

enum class Outcome { kConnected, kRefused, kTimedOut, kError };

const char* Name(Outcome o) {
  switch (o) {
    case Outcome::kConnected: return "connected";
    case Outcome::kRefused: return "refused";
    case Outcome::kTimedOut: return "timed out";
    case Outcome::kError: return "error";
  }
  return "?";
}

bool EnterNetns(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd.valid() && ::setns(fd.get(), CLONE_NEWNET) == 0;
}

sockaddr_in Addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// A TCP connect from inside `netns`, on a thread of its own.
Outcome ConnectFrom(const std::string& netns, const std::string& ip, uint16_t port) {
  Outcome out = Outcome::kError;
  std::thread([&] {
    if (!EnterNetns(netns)) return;
    UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in a = Addr(ip, port);
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
      out = errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH ? Outcome::kRefused
                                                                                  : Outcome::kError;
      return;
    }
    pollfd p{s.get(), POLLOUT, 0};
    if (::poll(&p, 1, 5000) != 1) {
      out = Outcome::kTimedOut;
      return;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) out = Outcome::kConnected;
    else out = err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH ? Outcome::kRefused
                                                                              : Outcome::kError;
  }).join();
  return out;
}

// Accepts and closes connections on ip:port inside `netns` until destroyed.
class Server {
 public:
  Server(const std::string& netns, const std::string& ip, uint16_t port) {
    std::atomic<int> ready{0};
    thread_ = std::thread([this, netns, ip, port, &ready] {
      if (!EnterNetns(netns)) return (void)(ready = -1);
      UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      int one = 1;
      ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in a = Addr(ip, port);
      if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(s.get(), 16) != 0)
        return (void)(ready = -1);
      ready = 1;
      while (!stop_) {
        pollfd p{s.get(), POLLIN, 0};
        if (::poll(&p, 1, 50) == 1) UniqueFd c(::accept4(s.get(), nullptr, nullptr, SOCK_CLOEXEC));
      }
    });
    while (ready == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ok_ = ready == 1;
  }
  ~Server() {
    stop_ = true;
    thread_.join();
  }
  bool ok() const { return ok_; }

 private:
  std::atomic<bool> stop_{false};
  bool ok_ = false;
  std::thread thread_;
};

class NodeNetworkRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, veths, nftables)";
    for (const char* tool : {"/usr/sbin/ip", "/usr/sbin/nft"})
      if (::access(tool, X_OK) != 0 && ::access((std::string("/sbin/") + (tool + 10)).c_str(), X_OK) != 0)
        GTEST_SKIP() << tool << " is not installed (scripts/install-deps.sh)";
    char tmpl[] = "/tmp/kubicle-netroot-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    node_ = dir_ + "/node";
    internet_ = dir_ + "/internet";
    ASSERT_TRUE(host_.CreateNetns(node_).ok());
    ASSERT_TRUE(host_.CreateNetns(internet_).ok());
    Must(host_.IpBatch(node_, "link set lo up\nlink add up0 type veth peer name down0 netns " + internet_ +
                                  "\naddr add 198.51.100.2/24 dev up0\nlink set up0 up\n"
                                  "route add default via 198.51.100.1\n"));
    Must(host_.IpBatch(internet_, "link set lo up\nlink set down0 up\naddr add 198.51.100.1/24 dev down0\n"
                                      "addr add 203.0.113.10/32 dev lo\naddr add 169.254.169.254/32 dev lo\n"));
    system_ = std::make_unique<LinuxNetSystem>(node_);
  }
  void TearDown() override {
    net_.reset();
    guests_.clear();
    if (dir_.empty()) return;
    for (const auto& e : fs::directory_iterator(dir_ + "/netns", ec_)) (void)host_.DeleteNetns(e.path());
    for (const auto& e : fs::directory_iterator(dir_, ec_))
      if (e.is_regular_file(ec_)) (void)host_.DeleteNetns(e.path());
    fs::remove_all(dir_, ec_);
  }
  void Must(const Status& s) { ASSERT_TRUE(s.ok()) << s.ToString(); }

  SandboxNetwork::Options Opts(const char* cidr = "10.200.0.0/16") {
    return {.system = system_.get(), .cidr = ParseCidr(cidr).value(), .netns_dir = dir_ + "/netns",
            .tag = "rt", .pool_size = 0};
  }
  void Start() {
    auto n = SandboxNetwork::Open(Opts());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    net_ = std::move(n).value();
    Must(net_->Start());
  }
  // A slot with a stand-in guest behind its tap0; returns the guest's namespace.
  std::string SlotWithGuest(const EgressPolicy& policy, NetworkSlot* out = nullptr) {
    auto slot = net_->Acquire(policy);
    EXPECT_TRUE(slot.ok()) << slot.status().ToString();
    if (!slot.ok()) return "";
    const std::string guest = dir_ + "/guest-" + std::to_string(slot->index);
    EXPECT_TRUE(host_.CreateNetns(guest).ok());
    EXPECT_TRUE(host_.IpBatch(slot->netns, "link del tap0\nlink add tap0 type veth peer name eth0 netns " + guest +
                                               "\naddr add 172.16.0.1/30 dev tap0\nlink set tap0 up\n").ok());
    EXPECT_TRUE(host_.IpBatch(guest, "link set lo up\nlink set eth0 up\naddr add 172.16.0.2/30 dev eth0\n"
                                     "route add default via 172.16.0.1\n").ok());
    guests_.push_back(guest);
    if (out) *out = *slot;
    return guest;
  }
  // This node's veths in the node namespace.
  size_t NodeVeths() {
    auto links = RunInNetns(node_, {"ip", "-o", "link", "show"}, "");
    size_t n = 0;
    for (size_t p = 0; links.ok() && (p = links->find(": khrt-", p)) != std::string::npos; ++p) ++n;
    return n;
  }

  std::error_code ec_;
  std::string dir_, node_, internet_;
  LinuxNetSystem host_;  // the test's own calls, each naming its namespace
  std::unique_ptr<LinuxNetSystem> system_;
  std::unique_ptr<SandboxNetwork> net_;
  std::vector<std::string> guests_;
};

#define EXPECT_OUTCOME(want, got) EXPECT_STREQ(Name(want), Name(got))

TEST_F(NodeNetworkRootTest, DefaultPolicyReachesTheInternetOnly) {
  Start();
  Server web(internet_, "0.0.0.0", 8080), node_server(node_, "0.0.0.0", 8080);
  ASSERT_TRUE(web.ok() && node_server.ok());
  // Without a policy, each of these answers: so the refusals below are the policy's.
  EXPECT_OUTCOME(Outcome::kConnected, ConnectFrom(node_, "169.254.169.254", 8080));
  EXPECT_OUTCOME(Outcome::kConnected, ConnectFrom(internet_, "198.51.100.2", 8080));
  NetworkSlot a, b;
  const std::string guest = SlotWithGuest({}, &a);
  SlotWithGuest({}, &b);
  ASSERT_FALSE(HasFailure());
  EXPECT_OUTCOME(Outcome::kConnected, ConnectFrom(guest, "198.51.100.1", 8080));
  EXPECT_OUTCOME(Outcome::kConnected, ConnectFrom(guest, "203.0.113.10", 8080));
  EXPECT_OUTCOME(Outcome::kRefused, ConnectFrom(guest, "169.254.169.254", 8080));  // cloud metadata
  EXPECT_OUTCOME(Outcome::kRefused, ConnectFrom(guest, "198.51.100.2", 8080));     // the node
  EXPECT_OUTCOME(Outcome::kRefused, ConnectFrom(guest, b.addresses.host.ToString(), 8080));  // another slot's veth
  EXPECT_OUTCOME(Outcome::kRefused, ConnectFrom(guest, b.addresses.sandbox.ToString(), 8080));
  EXPECT_OUTCOME(Outcome::kRefused, ConnectFrom(guest, a.addresses.host.ToString(), 8080));  // its own veth's host end
}

TEST_F(NodeNetworkRootTest, NoneBlocksAllEgress) {
  Start();
  Server web(internet_, "0.0.0.0", 8080);
  ASSERT_TRUE(web.ok());
  NetworkSlot slot;
  const std::string guest = SlotWithGuest({EgressMode::kNone, {}}, &slot);
  ASSERT_FALSE(HasFailure());
  EXPECT_OUTCOME(Outcome::kRefused, ConnectFrom(guest, "198.51.100.1", 8080));
  Must(net_->ApplyPolicy(slot.index, {}));
  EXPECT_OUTCOME(Outcome::kConnected, ConnectFrom(guest, "198.51.100.1", 8080)) << "policy replaced in place";
}

TEST_F(NodeNetworkRootTest, AllowOpensOnlyItsRules) {
  Start();
  Server s1(internet_, "0.0.0.0", 8080), s2(internet_, "0.0.0.0", 9090);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EgressPolicy allow{EgressMode::kAllow,
                     {{ParseCidr("198.51.100.1/32").value(), {8080}},
                      {ParseCidr("203.0.113.0/24").value(), {}},
                      {ParseCidr("169.254.0.0/16").value(), {}}}};  // cannot open the never-list
  const std::string guest = SlotWithGuest(allow);
  ASSERT_FALSE(HasFailure());
  EXPECT_OUTCOME(Outcome::kConnected, ConnectFrom(guest, "198.51.100.1", 8080));
  EXPECT_OUTCOME(Outcome::kRefused, ConnectFrom(guest, "198.51.100.1", 9090));
  EXPECT_OUTCOME(Outcome::kConnected, ConnectFrom(guest, "203.0.113.10", 9090));
  EXPECT_OUTCOME(Outcome::kRefused, ConnectFrom(guest, "169.254.169.254", 8080));
}

TEST_F(NodeNetworkRootTest, RefusesACidrOverlappingTheNodesRoutes) {
  auto n = SandboxNetwork::Open(Opts("198.51.100.0/24"));
  EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition) << n.status().ToString();
}

TEST_F(NodeNetworkRootTest, OrphansAreSweptAndNothingIsLeft) {
  auto opts = Opts();
  opts.pool_size = 2;
  uint32_t running = 0;
  {
    auto n = SandboxNetwork::Open(opts);
    ASSERT_TRUE(n.ok());
    ASSERT_TRUE((*n)->Start().ok());
    auto a = (*n)->Acquire({});
    auto b = (*n)->Acquire({EgressMode::kNone, {}});
    ASSERT_TRUE(a.ok() && b.ok());
    running = b->index;
    for (int i = 0; i < 5000 && (*n)->census().pooled < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(NodeVeths(), 4u);
    (*n)->Stop(false);  // as a daemon that dies: slots in use stay
  }
  EXPECT_EQ(NodeVeths(), 2u);
  auto n = SandboxNetwork::Open(opts);  // its own veths' routes are no overlap
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  auto kept = (*n)->Adopt(running);
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE((*n)->Start().ok());  // sweeps the other slot, whose sandbox is gone
  // Swept, and its index free again: Start's first slot may be built there.
  EXPECT_EQ((*n)->census().orphans_swept, 1u);
  EXPECT_TRUE(fs::exists(kept->netns));
  (*n)->Release(kept->index);
  (*n)->Stop(true);
  EXPECT_EQ(NodeVeths(), 0u);
  EXPECT_TRUE(fs::is_empty(dir_ + "/netns"));
  auto tables = RunInNetns(node_, {"nft", "list", "tables"}, "");
  ASSERT_TRUE(tables.ok());
  EXPECT_EQ(tables->find("kubicle_rt"), std::string::npos) << *tables;
}

}  // namespace
}  // namespace kubicle::noderuntime::network
