#include "noderuntime/network/fake_net_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <sstream>

namespace kubicle::noderuntime::network::testing {

bool FakeNetSystem::Failing(const std::string& op, const std::string& netns) {
  ++calls_;
  for (const std::string& key : {op + " in " + netns, op}) {
    auto it = failures_.find(key);
    if (it == failures_.end() || it->second <= 0) continue;
    --it->second;
    return true;
  }
  return false;
}

Status FakeNetSystem::Preflight() {
  std::lock_guard l(mu_);
  if (Failing("preflight")) return Status::FailedPrecondition("missing CAP_NET_ADMIN (injected)");
  return Status::Ok();
}

Status FakeNetSystem::IpBatch(const std::string& netns, const std::string& batch) {
  std::lock_guard l(mu_);
  if (Failing("ip", netns)) return Status::Internal("ip failed (injected)");
  batches_[netns].push_back(batch);
  if (!netns.empty() && !namespaces_.count(netns)) return Status::Internal("ip: no namespace " + netns);
  std::istringstream in(batch);
  Status st;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string a, b, name, type;
    words >> a >> b >> name;
    if (!netns.empty() || a != "link") continue;
    if (b == "add") {
      if (!links_.insert(name).second) return Status::Internal("ip: link " + name + " exists");
      std::string w;
      while (words >> w)  // "... peer name veth0 netns PATH": the peer goes in
        if (w == "netns" && words >> w) {
          if (!namespaces_.count(w)) return Status::Internal("ip: no namespace " + w);
          peer_netns_[name] = w;
        }
    } else if (b == "del") {
      peer_netns_.erase(name);
      if (!links_.erase(name)) st = Status::Internal("ip: cannot find device " + name);
    }
  }
  return st;
}

Status FakeNetSystem::Nft(const std::string& netns, const std::string& ruleset) {
  std::lock_guard l(mu_);
  if (Failing("nft", netns)) return Status::Internal("nft failed (injected)");
  if (!netns.empty() && !namespaces_.count(netns)) return Status::Internal("nft: no namespace " + netns);
  rulesets_[netns] = ruleset;
  nft_history_[netns].push_back(ruleset);
  return Status::Ok();
}

Result<std::string> FakeNetSystem::IpQuery(const std::vector<std::string>& args) {
  std::lock_guard l(mu_);
  if (Failing("ip")) return Status::Internal("ip failed (injected)");
  if (!args.empty() && args[0] == "route") return routes_;
  if (!args.empty() && args[0] == "addr") return addresses_;
  std::string out = "1: lo: <LOOPBACK,UP> mtu 65536\n";
  int n = 2;
  for (const std::string& link : links_)
    out += std::to_string(n++) + ": " + link + "@if2: <BROADCAST,UP> mtu 1500\n";
  return out;
}

Status FakeNetSystem::CreateNetns(const std::string& path) {
  std::lock_guard l(mu_);
  if (Failing("netns")) return Status::Internal("netns failed (injected)");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (fd < 0) return Status::FromErrno("create " + path);
  ::close(fd);
  namespaces_.insert(path);
  return Status::Ok();
}

Status FakeNetSystem::DeleteNetns(const std::string& path) {
  std::lock_guard l(mu_);
  if (Failing("netns")) return Status::Internal("netns failed (injected)");
  ::unlink(path.c_str());
  namespaces_.erase(path);
  rulesets_.erase(path);
  // The namespace end of a veth goes with its namespace, and takes the
  // host end along (as the kernel does): only the veths whose peer it holds.
  for (auto it = peer_netns_.begin(); it != peer_netns_.end();) {
    if (it->second == path) {
      links_.erase(it->first);
      it = peer_netns_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::Ok();
}

Status FakeNetSystem::Sysctl(const std::string& netns, const std::string& key, const std::string& value) {
  std::lock_guard l(mu_);
  if (Failing("sysctl", netns)) return Status::Internal("sysctl failed (injected)");
  sysctls_[netns + "|" + key] = value;
  return Status::Ok();
}

void FakeNetSystem::SetRoutes(std::string text) {
  std::lock_guard l(mu_);
  routes_ = std::move(text);
}
void FakeNetSystem::SetAddresses(std::string text) {
  std::lock_guard l(mu_);
  addresses_ = std::move(text);
}
void FakeNetSystem::FailNext(const std::string& op, int count) {
  std::lock_guard l(mu_);
  failures_[op] = count;
}
void FakeNetSystem::FailNextIn(const std::string& op, const std::string& netns, int count) {
  std::lock_guard l(mu_);
  failures_[op + " in " + netns] = count;
}
std::set<std::string> FakeNetSystem::namespaces() const {
  std::lock_guard l(mu_);
  return namespaces_;
}
std::set<std::string> FakeNetSystem::host_links() const {
  std::lock_guard l(mu_);
  return links_;
}
std::string FakeNetSystem::ruleset(const std::string& netns) const {
  std::lock_guard l(mu_);
  auto it = rulesets_.find(netns);
  return it == rulesets_.end() ? "" : it->second;
}
std::string FakeNetSystem::sysctl(const std::string& netns, const std::string& key) const {
  std::lock_guard l(mu_);
  auto it = sysctls_.find(netns + "|" + key);
  return it == sysctls_.end() ? "" : it->second;
}
std::vector<std::string> FakeNetSystem::batches(const std::string& netns) const {
  std::lock_guard l(mu_);
  auto it = batches_.find(netns);
  return it == batches_.end() ? std::vector<std::string>{} : it->second;
}
std::vector<std::string> FakeNetSystem::rulesets_applied(const std::string& netns) const {
  std::lock_guard l(mu_);
  auto it = nft_history_.find(netns);
  return it == nft_history_.end() ? std::vector<std::string>{} : it->second;
}
size_t FakeNetSystem::calls() const {
  std::lock_guard l(mu_);
  return calls_;
}

}  // namespace kubicle::noderuntime::network::testing
