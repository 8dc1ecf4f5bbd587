#include "bench/node/bench_node.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kubicle::bench {
namespace {
std::string& ProgramName() {
  static std::string name = "kubicle-bench";
  return name;
}
// The running node, so that Die (from any thread) stops it: its VMs would
// outlive the benchmark otherwise.
std::atomic<pid_t> running_node{0};
}  // namespace

using namespace std::chrono_literals;

void SetProgramName(std::string name) { ProgramName() = std::move(name); }

void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "%s: %s: %s\n", ProgramName().c_str(), what.c_str(), st.ToString().c_str());
  if (pid_t pid = running_node.exchange(0); pid > 0) {
    ::kill(pid, SIGTERM);  // --stop-vms-on-exit: it takes its VMs down
    for (int i = 0; i < 300 && ::waitpid(pid, nullptr, WNOHANG) == 0; ++i) ::usleep(100 * 1000);
  }
  std::fflush(nullptr);
  std::_Exit(1);  // other threads may still be running: no static destructors
}

std::unique_ptr<BenchNode> BenchNode::Start(const BenchNodeOptions& options) {
  std::unique_ptr<BenchNode> n(new BenchNode);
  std::string tmpl = "/tmp/" + ProgramName() + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) Die("mkdtemp", Status::FromErrno("mkdtemp"));
  n->dir_ = tmpl;
  std::vector<std::string> args = {
      "--state-dir", n->dir_ + "/state", "--vmm", KUBICLE_VMM_BIN, "--listen", "127.0.0.1:0",
      "--capacity-mem", "1T", "--capacity-vcpus", "100000", "--pool-size",
      std::to_string(options.pool_size), "--no-cgroups", "--stop-vms-on-exit"};
  if (options.tls) args.push_back("--tls=on");
  auto net = noderuntime::network::SharedHostNetworkFlags(&n->cidr_);
  if (!net.ok()) Die("sandbox CIDR", net.status());
  args.insert(args.end(), net->begin(), net->end());
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  const std::string log = n->dir_ + "/daemon.log";
  auto d = noderuntime::daemon::DaemonProcess::Start(KUBICLE_NODE_BIN, args, log, 30s);
  if (!d.ok()) Die("starting kubicle-node (log in " + log + ")", d.status());
  n->daemon_ = std::move(*d);
  running_node = n->daemon_->pid();
  std::ifstream tf(n->dir_ + "/state/admin-token");
  tf >> n->token_;
  if (options.tls) n->ca_file_ = n->dir_ + "/state/tls/ca.crt";
  return n;
}

BenchNode::~BenchNode() {
  Stop();
  std::error_code ec;
  if (!keep_dir_) std::filesystem::remove_all(dir_, ec);
}

std::unique_ptr<noderuntime::client::NodeClient> BenchNode::NewClient(const std::string& token) const {
  auto c = noderuntime::client::NodeClient::Create(url(), token.empty() ? token_ : token, ca_file_);
  if (!c.ok()) Die("client", c.status());
  return std::move(*c);
}

noderuntime::client::json CreateSandbox(noderuntime::client::NodeClient& c, const std::string& run) {
  auto r = c.Call("POST", "/v1/sandboxes", {{"template", "tg"}, {"labels", {{"kubicle.dev/run", run}}}});
  if (!r.ok()) Die("create", r.status());
  return *r;
}

void SweepRun(noderuntime::client::NodeClient& c, const std::string& run) {
  auto r = c.Call("DELETE", "/v1/sandboxes?labelSelector=kubicle.dev%2Frun%3D" + run);
  if (!r.ok()) Die("sweep " + run, r.status());
}

int BenchNode::port() const { return std::stoi(url().substr(url().rfind(':') + 1)); }

double BenchNode::BakeTestGuest(const std::string& name, uint64_t mem_mib) const {
  auto c = NewClient();
  auto put = c->Call("PUT", "/v1/templates/" + name,
                     {{"kernel", KUBICLE_TESTGUEST_ELF}, {"memMib", mem_mib}});
  if (!put.ok()) Die("template put", put.status());
  for (int i = 0; i < 1200; ++i) {
    auto t = c->Call("GET", "/v1/templates/" + name);
    if (!t.ok()) Die("template get", t.status());
    if ((*t)["state"] == "Ready") return (*t)["bakeSeconds"].get<double>();
    if ((*t)["state"] == "Failed") Die("bake", Status::Internal((*t)["message"]));
    std::this_thread::sleep_for(50ms);
  }
  Die("bake", Status::DeadlineExceeded("template " + name + " not ready in 60 s"));
}

void BenchNode::Stop() {
  if (stopped_ || !daemon_) return;
  stopped_ = true;
  running_node = 0;
  daemon_->Signal(SIGTERM);
  auto rc = daemon_->Wait(30s);
  if (rc == std::optional<int>(0)) {
    std::printf("kubicle-node stopped: exit 0\n");
    return;
  }
  keep_dir_ = true;  // its log says why
  std::printf("kubicle-node stopped: %s; log kept: %s/daemon.log\n",
              rc ? ("exit " + std::to_string(*rc)).c_str() : "not within 30 s", dir_.c_str());
}

}  // namespace kubicle::bench
