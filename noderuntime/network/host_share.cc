#include "noderuntime/network/host_share.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <vector>

#include "common/sha256.h"
#include "noderuntime/network/ipv4.h"
#include "noderuntime/network/ruleset.h"

namespace kubicle::noderuntime::network {
namespace {

constexpr char kLockDir[] = "/tmp/kubicle-sandbox-cidr";
constexpr int kBlocks = 256;  // /20s of 10.240.0.0/12

Cidr Block(int k) { return Cidr{Ipv4{(10u << 24) | (240u << 16) | uint32_t(k) << 12}, 20}; }

// Destinations of the host's routes, in every table.
std::vector<Cidr> RoutedBlocks(NetSystem& host) {
  std::vector<Cidr> out;
  auto routes = host.IpQuery({"route", "show", "table", "all"});
  if (!routes.ok()) return out;
  std::istringstream lines(*routes);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string w;
    words >> w;
    // "local 10.1.2.3 ...", "broadcast ...": the type comes first.
    if (w == "local" || w == "broadcast" || w == "unicast" || w == "multicast" || w == "anycast" ||
        w == "blackhole" || w == "unreachable" || w == "prohibit" || w == "throw" || w == "nat")
      words >> w;
    if (auto c = ParseCidr(w, /*allow_bare=*/true); c.ok()) out.push_back(*c);
  }
  return out;
}

}  // namespace

std::string SandboxNetworkTag(const std::string& state_dir) { return Sha256Hex(state_dir).substr(0, 4); }

Result<SandboxCidrLease> SandboxCidrLease::Take(NetSystem& host) {
  ::mkdir(kLockDir, 01777);  // may exist
  const std::vector<Cidr> routed = RoutedBlocks(host);
  for (int k = 0; k < kBlocks; ++k) {
    const Cidr block = Block(k);
    bool overlaps = false;
    for (const Cidr& r : routed) overlaps = overlaps || r.Overlaps(block);
    if (overlaps) continue;
    const std::string path = std::string(kLockDir) + "/" + std::to_string(k) + ".lock";
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
    if (!fd.valid()) return Status::FromErrno("open " + path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // another process's
    SandboxCidrLease lease;
    lease.lock_ = std::move(fd);
    lease.cidr_ = block.ToString();
    return lease;
  }
  return Status::ResourceExhausted("no free sandbox CIDR in 10.240.0.0/12 (every /20 is locked or routed)");
}

Result<std::vector<std::string>> SharedHostNetworkFlags(std::optional<SandboxCidrLease>* lease) {
  if (::geteuid() != 0) return std::vector<std::string>{"--sandbox-network=off"};
  if (!*lease) {
    LinuxNetSystem host;
    ASSIGN_OR_RETURN(SandboxCidrLease l, SandboxCidrLease::Take(host));
    lease->emplace(std::move(l));
  }
  return std::vector<std::string>{"--sandbox-network-cidr=" + (*lease)->cidr()};
}

void RemoveNodeNetwork(NetSystem& host, const std::string& netns_dir, const std::string& tag) {
  const std::string prefix = "kh" + tag + "-";
  if (auto links = host.IpQuery({"link", "show"}); links.ok()) {
    std::istringstream lines(*links);
    std::string batch;
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string index, name;
      words >> index >> name;  // "7: khab12-0@if2: <...>"
      name = name.substr(0, name.find_first_of("@:"));
      if (name.rfind(prefix, 0) == 0) batch += "link del " + name + "\n";
    }
    if (!batch.empty()) (void)host.IpBatch("", batch);
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(netns_dir, ec))
    (void)host.DeleteNetns(e.path().string());
  (void)host.Nft("", RenderHostRulesetRemoval("kubicle_" + tag));
}

}  // namespace kubicle::noderuntime::network
