// NetSystem: the seam between the node's sandbox network and the OS, so
// SandboxNetwork is unit-tested with a fake (FakeNetSystem) and run for
// real with LinuxNetSystem. Everything that changes the host's network goes
// through these few calls; each takes whole batches (one `ip -batch -` or
// `nft -f -` per step) because process start-up, not the kernel, is what a
// slot's build costs.
//
// A namespace is named by the path of a file it is bind-mounted on (as `ip
// netns` does under /run/netns, but in a directory the node owns), and the
// empty path is the host's namespace: the current one, or the one given to
// LinuxNetSystem (tests build a whole "node" inside a namespace of theirs).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime::network {

class NetSystem {
 public:
  virtual ~NetSystem() = default;
  // What the calls below need from the host, checked before any is made,
  // so a node that lacks it fails with what to grant instead of with the
  // first tool's error. FailedPrecondition naming the missing piece.
  virtual Status Preflight() = 0;
  // `ip -batch -` with `batch` (one command a line) on stdin, in `netns`.
  virtual Status IpBatch(const std::string& netns, const std::string& batch) = 0;
  // `nft -f -` with `ruleset` on stdin, in `netns`.
  virtual Status Nft(const std::string& netns, const std::string& ruleset) = 0;
  // The output of `ip -4 -o <args>` in the host's namespace (listings).
  virtual Result<std::string> IpQuery(const std::vector<std::string>& args) = 0;
  // A new, empty namespace bind-mounted on `path` (created as a file).
  virtual Status CreateNetns(const std::string& path) = 0;
  // Unmounts and removes `path`; Ok if it is not there. The namespace ends
  // when nothing else holds it (a VMM's TAP does until the VMM exits).
  virtual Status DeleteNetns(const std::string& path) = 0;
  // Writes `value` to /proc/sys/<key> as seen from `netns`.
  virtual Status Sysctl(const std::string& netns, const std::string& key,
                        const std::string& value) = 0;
};

class LinuxNetSystem final : public NetSystem {
 public:
  // `host_netns`: the namespace file that plays the host (empty: ours).
  explicit LinuxNetSystem(std::string host_netns = "") : host_netns_(std::move(host_netns)) {}
  // CAP_NET_ADMIN and CAP_SYS_ADMIN in effect, `ip` and `nft` installed,
  // /dev/net/tun present.
  Status Preflight() override;
  Status IpBatch(const std::string& netns, const std::string& batch) override;
  Status Nft(const std::string& netns, const std::string& ruleset) override;
  Result<std::string> IpQuery(const std::vector<std::string>& args) override;
  Status CreateNetns(const std::string& path) override;
  Status DeleteNetns(const std::string& path) override;
  Status Sysctl(const std::string& netns, const std::string& key, const std::string& value) override;

 private:
  const std::string& Resolve(const std::string& netns) const {
    return netns.empty() ? host_netns_ : netns;
  }
  std::string host_netns_;
};

// Runs argv[0] (a path, or a name looked up in /usr/sbin, /sbin, /usr/bin,
// /bin) with `input` on stdin inside `netns` (empty: ours), and returns its
// stdout; a non-zero exit is an error carrying the head of its stderr.
// Output beyond 4 MiB is cut off. Used by LinuxNetSystem; tests use it to
// look at namespaces.
Result<std::string> RunInNetns(const std::string& netns, const std::vector<std::string>& argv,
                               const std::string& input);

}  // namespace kubicle::noderuntime::network
