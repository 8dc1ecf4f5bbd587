// What the node benchmarks share: a kubicle-node on a scratch state
// directory with the test-guest template baked, and a fatal-error exit that
// names the benchmark. Benchmarks print figures and never assert on timing,
// so any failure on the way is fatal.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "noderuntime/client/node_client.h"
#include "noderuntime/daemon/daemon_process.h"
#include "noderuntime/network/host_share.h"

namespace kubicle::bench {

// Prints "<program>: <what>: <status>" to stderr and exits 1.
[[noreturn]] void Die(const std::string& what, const Status& st);
// The name Die prints (the benchmark's binary name); set once in main.
void SetProgramName(std::string name);

// POST a sandbox of template "tg" labelled kubicle.dev/run=`run`; its answer.
noderuntime::client::json CreateSandbox(noderuntime::client::NodeClient& c, const std::string& run);
// DELETE every sandbox labelled kubicle.dev/run=`run`.
void SweepRun(noderuntime::client::NodeClient& c, const std::string& run);

struct BenchNodeOptions {
  int pool_size = 4;                   // warm pool VMs per shape
  bool tls = false;
  std::vector<std::string> extra_args; // appended to `kubicle-node serve`
};

class BenchNode {
 public:
  // Starts kubicle-node (no cgroups, capacity unbounded) on a new directory
  // under /tmp; dies with the daemon log's path if it does not come up.
  static std::unique_ptr<BenchNode> Start(const BenchNodeOptions& options);
  ~BenchNode();  // Stop(), then the scratch directory goes (kept after an unclean stop)

  // A client with `token` (the admin token when empty).
  std::unique_ptr<noderuntime::client::NodeClient> NewClient(const std::string& token = "") const;
  // PUT a test-guest template and wait until this node reports it Ready;
  // returns the bake's seconds as the node reports them.
  double BakeTestGuest(const std::string& name, uint64_t mem_mib) const;
  // SIGTERM and wait; prints whether it exited cleanly. Idempotent.
  void Stop();

  const std::string& url() const { return daemon_->url(); }
  const std::string& dir() const { return dir_; }
  const std::string& admin_token() const { return token_; }
  int port() const;
  int pid() const { return daemon_->pid(); }

 private:
  BenchNode() = default;
  std::string dir_;
  std::unique_ptr<noderuntime::daemon::DaemonProcess> daemon_;
  std::string token_;
  std::string ca_file_;
  // Its sandbox network is on, as by default, on a CIDR block of its own.
  std::optional<noderuntime::network::SandboxCidrLease> cidr_;
  bool stopped_ = false;
  bool keep_dir_ = false;  // an unclean stop leaves its log
};

}  // namespace kubicle::bench
