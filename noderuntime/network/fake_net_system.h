// FakeNetSystem: NetSystem in memory, for unit tests of SandboxNetwork and
// SandboxManager. It keeps what the real kernel would: namespace files (as
// real empty files, so directory listings see them), host links (from
// `link add`/`link del` lines), each namespace's last ruleset and sysctls;
// `ip -o` listings are rendered from that plus the routes and addresses a
// test sets. Failures are injected per operation. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "noderuntime/network/net_system.h"

namespace kubicle::noderuntime::network::testing {

class FakeNetSystem final : public NetSystem {
 public:
  Status Preflight() override;
  Status IpBatch(const std::string& netns, const std::string& batch) override;
  Status Nft(const std::string& netns, const std::string& ruleset) override;
  Result<std::string> IpQuery(const std::vector<std::string>& args) override;
  Status CreateNetns(const std::string& path) override;
  Status DeleteNetns(const std::string& path) override;
  Status Sysctl(const std::string& netns, const std::string& key, const std::string& value) override;

  // ---- for tests ----
  // `ip -4 -o route show table all` and `addr show` answer these lines.
  void SetRoutes(std::string text);
  void SetAddresses(std::string text);
  // The next call of `op` ("ip", "nft", "netns", "sysctl", "preflight")
  // fails, `count` times.
  void FailNext(const std::string& op, int count = 1);
  // The same, only for calls in the namespace `netns` ("ip", "nft",
  // "sysctl"): what another thread does elsewhere cannot take it.
  void FailNextIn(const std::string& op, const std::string& netns, int count = 1);
  std::set<std::string> namespaces() const;
  std::set<std::string> host_links() const;
  std::string ruleset(const std::string& netns) const;  // "" for the host's
  std::string sysctl(const std::string& netns, const std::string& key) const;
  // Every batch sent to `ip` for `netns`, in order.
  std::vector<std::string> batches(const std::string& netns) const;
  // Every ruleset sent to `nft` for `netns`, in order; kept after the
  // namespace goes, as batches are.
  std::vector<std::string> rulesets_applied(const std::string& netns) const;
  size_t calls() const;

 private:
  bool Failing(const std::string& op, const std::string& netns = "");

  mutable std::mutex mu_;
  std::string routes_, addresses_;
  std::map<std::string, int> failures_;
  std::set<std::string> namespaces_, links_;
  std::map<std::string, std::string> peer_netns_;  // host veth -> its peer's namespace
  std::map<std::string, std::string> rulesets_;
  std::map<std::string, std::string> sysctls_;
  std::map<std::string, std::vector<std::string>> batches_;
  std::map<std::string, std::vector<std::string>> nft_history_;
  size_t calls_ = 0;
};

}  // namespace kubicle::noderuntime::network::testing
