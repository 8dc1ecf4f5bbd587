// kvm tests of the kubicle-node binary: the real daemon on a scratch state
// directory with the test-guest template, driven over HTTP.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "noderuntime/client/node_client.h"
#include "noderuntime/daemon/daemon_process.h"
#include "noderuntime/network/host_share.h"
#include "noderuntime/node_util.h"
#include "noderuntime/vmmhost/vmm_process.h"

namespace kubicle::noderuntime::daemon {
namespace {

namespace fs = std::filesystem;
using client::json;
using client::NodeClient;
using namespace std::chrono_literals;

class NodeDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
    char tmpl[] = "/tmp/kn-daemon-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    if (daemon_) {
      daemon_->Signal(SIGKILL);
      daemon_->Wait(10s);
    }
    // VMMs outlive the daemon by design: kill what this test left.
    for (pid_t pid : FindVmmProcesses(KUBICLE_VMM_BIN, dir_)) ::kill(pid, SIGKILL);
    if (HasFailure()) {
      std::ifstream log(dir_ + "/daemon.log");
      std::string text((std::istreambuf_iterator<char>(log)), {});
      std::cerr << "--- daemon log (tail) ---\n"
                << text.substr(text.size() > 6000 ? text.size() - 6000 : 0) << "\n";
    }
    for (int i = 0; i < 100 && !FindVmmProcesses(KUBICLE_VMM_BIN, dir_).empty(); ++i) {
      std::this_thread::sleep_for(20ms);
    }
    if (cidr_) {  // a killed daemon leaves its veths, namespaces and table
      network::LinuxNetSystem host;
      network::RemoveNodeNetwork(host, dir_ + "/state/netns", network::SandboxNetworkTag(dir_ + "/state"));
    }
    fs::remove_all(dir_);
  }

  void StartDaemon(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--state-dir", dir_ + "/state", "--vmm", KUBICLE_VMM_BIN,
                                  "--listen", "127.0.0.1:0", "--capacity-mem", "16G",
                                  "--capacity-vcpus", "256", "--pool-size", "2", "--no-cgroups"};
    args.insert(args.end(), extra.begin(), extra.end());
    // The sandbox network is on by default; it needs root. Its CIDR is this
    // test's own (kept across restarts): other nodes may share the host.
    if (::geteuid() != 0) {
      args.push_back("--sandbox-network=off");
    } else {
      if (!cidr_) {
        network::LinuxNetSystem host;
        auto lease = network::SandboxCidrLease::Take(host);
        ASSERT_TRUE(lease.ok()) << lease.status().ToString();
        cidr_ = std::move(*lease);
      }
      args.push_back("--sandbox-network-cidr=" + cidr_->cidr());
    }
    auto d = DaemonProcess::Start(KUBICLE_NODE_BIN, args, dir_ + "/daemon.log", 30s);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(*d);
    std::ifstream tf(dir_ + "/state/admin-token");
    std::string token;
    tf >> token;
    ASSERT_FALSE(token.empty());
    token_ = token;
    // Over TLS the client verifies the node against the CA it made.
    ca_file_ = daemon_->url().rfind("https://", 0) == 0 ? dir_ + "/state/tls/ca.crt" : "";
    auto c = NodeClient::Create(daemon_->url(), token, ca_file_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
  }

  void BakeTestGuest() {
    auto put = client_->Call("PUT", "/v1/templates/tg",
                             {{"kernel", KUBICLE_TESTGUEST_ELF}, {"memMib", 64}});
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    for (int i = 0; i < 1200; ++i) {
      auto t = client_->Call("GET", "/v1/templates/tg");
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      if ((*t)["state"] == "Ready") return;
      ASSERT_NE((*t)["state"], "Failed") << t->dump();
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "template did not bake in 60 s";
  }

  json Exec(const std::string& id, std::vector<std::string> argv) {
    auto r = client_->Call("POST", "/v1/sandboxes/" + id + "/exec", {{"argv", argv}});
    EXPECT_TRUE(r.ok()) << id << ": " << r.status().ToString();
    return r.ok() ? *r : json();
  }

  std::string dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<NodeClient> client_;
  std::string token_;
  std::string ca_file_;
  std::optional<network::SandboxCidrLease> cidr_;
};

TEST_F(NodeDaemonTest, CreateExecFilesDeleteOverHttpAndMetricsParse) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(BakeTestGuest());
  auto s = client_->Call("POST", "/v1/sandboxes",
                         {{"template", "tg"}, {"id", "one"}, {"labels", {{"kubicle.dev/run", "t"}}}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)["state"], "Running");
  json r = Exec("one", {"echo", "hello", "node"});
  EXPECT_EQ(r["exitCode"], 0);
  EXPECT_EQ(r["stdout"], "hello node\n");
  EXPECT_EQ(Exec("one", {"hostname"})["stdout"], "one\n");
  std::string streamed;
  auto exit = client_->ExecStream("one", {{"argv", {"echo", "streamed"}}},
                                  [&](const std::string&, const std::string& d) { streamed += d; });
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_EQ(streamed, "streamed\n");
  ASSERT_TRUE(client_->PutFile("one", "/data", std::string("abc\0def", 7), 0644).ok());
  EXPECT_EQ(*client_->GetFile("one", "/data"), std::string("abc\0def", 7));

  // The sandbox's own token opens exec on it, and not delete.
  auto own = NodeClient::Create(daemon_->url(), (*s)["token"]);
  auto own_exec = (*own)->Call("POST", "/v1/sandboxes/one/exec", {{"argv", {"echo", "x"}}});
  EXPECT_TRUE(own_exec.ok()) << own_exec.status().ToString();
  EXPECT_EQ((*own)->Call("DELETE", "/v1/sandboxes/one").status().code(),
            StatusCode::kPermissionDenied);

  // Bad input against the real runtime: refused, nothing created.
  EXPECT_EQ(client_->Call("POST", "/v1/sandboxes", {{"template", "nope"}}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(client_->Call("GET", "/v1/sandboxes?labelSelector=a%20in%20(b").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Call("POST", "/v1/sandboxes", {{"template", "tg"}, {"ttl", 5}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*client_->Call("GET", "/v1/sandboxes"))["items"].size(), 1u);

  auto del = client_->Call("DELETE", "/v1/sandboxes/one");
  ASSERT_TRUE(del.ok()) << del.status().ToString();
  EXPECT_EQ(client_->Call("GET", "/v1/sandboxes/one").status().code(), StatusCode::kNotFound);

  // /metrics is Prometheus text, not JSON: fetched with curl, as a scraper would.
  std::string cmd = "curl -sf " + daemon_->url() + "/metrics -o " + dir_ + "/metrics.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  cmd = std::string("python3 ") + KUBICLE_CHECK_METRICS + " " + dir_ + "/metrics.txt" +
        " 'kubicle_http_request_seconds{route=POST /v1/sandboxes,code=201}'"
        " 'kubicle_http_request_seconds{route=POST /v1/sandboxes/{id}/exec}'"
        " kubicle_restore_seconds kubicle_exec_seconds kubicle_template_bake_seconds" +
        std::string(::geteuid() == 0 ? " kubicle_sandbox_network_slot_build_seconds" : "");
  int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "prometheus_client not installed";
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;

  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(30s), std::optional<int>(0)) << "SIGTERM is a clean stop";
  // No sandbox was left, and a stop kills the idle pool VMs: nothing remains.
  for (int i = 0; i < 250 && !FindVmmProcesses(KUBICLE_VMM_BIN, dir_).empty(); ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(FindVmmProcesses(KUBICLE_VMM_BIN, dir_).size(), 0u);
}

TEST_F(NodeDaemonTest, Kill9WithTwentySandboxesThenRestartReadoptsAll) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(BakeTestGuest());
  constexpr int kCount = 20;
  std::vector<std::thread> threads;
  std::atomic<int> created{0};
  for (int i = 0; i < kCount; ++i) {
    threads.emplace_back([&, i] {
      auto r = client_->Call("POST", "/v1/sandboxes",
                             {{"template", "tg"}, {"id", "s" + std::to_string(i)},
                              {"labels", {{"kubicle.dev/run", "r9"}}}});
      if (r.ok()) ++created;
      else ADD_FAILURE() << r.status().ToString();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(created, kCount);

  daemon_->Signal(SIGKILL);
  ASSERT_EQ(daemon_->Wait(10s), std::optional<int>(128 + SIGKILL));
  daemon_.reset();
  ASSERT_NO_FATAL_FAILURE(StartDaemon());

  auto list = client_->Call("GET", "/v1/sandboxes?labelSelector=kubicle.dev%2Frun%3Dr9");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ((*list)["items"].size(), static_cast<size_t>(kCount)) << list->dump();
  for (const auto& s : (*list)["items"]) EXPECT_EQ(s["state"], "Running") << s.dump();
  for (int i = 0; i < kCount; ++i) {
    const std::string id = "s" + std::to_string(i);
    EXPECT_EQ(Exec(id, {"hostname"})["stdout"], id + "\n");
  }
  auto swept = client_->Call("DELETE", "/v1/sandboxes?labelSelector=kubicle.dev%2Frun%3Dr9");
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  EXPECT_EQ((*swept)["deleted"].size(), static_cast<size_t>(kCount));
  EXPECT_EQ((*client_->Call("GET", "/v1/sandboxes"))["items"].size(), 0u);
}

// --tls=on: the node makes its CA and serving certificate at first start,
// serves only TLS, and keeps the CA across restarts (clients trust it).
TEST_F(NodeDaemonTest, TlsWithTheNodesOwnCaVerifiedByClients) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--tls=on", "--stop-vms-on-exit"}));
  ASSERT_EQ(daemon_->url().rfind("https://127.0.0.1:", 0), 0u) << daemon_->url();
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/state/tls").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat((dir_ + "/state/tls/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_NO_FATAL_FAILURE(BakeTestGuest());
  auto s = client_->Call("POST", "/v1/sandboxes", {{"template", "tg"}, {"id", "t1"}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Exec("t1", {"echo", "over", "tls"})["stdout"], "over tls\n");
  std::string streamed;
  auto exit = client_->ExecStream("t1", {{"argv", {"echo", "streamed"}}},
                                  [&](const std::string&, const std::string& d) { streamed += d; });
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_EQ(streamed, "streamed\n");
  ASSERT_TRUE(client_->PutFile("t1", "/f", "tls file", 0644).ok());
  EXPECT_EQ(*client_->GetFile("t1", "/f"), "tls file");
  // Without the node's CA the client refuses the node.
  auto unverified = NodeClient::Create(daemon_->url(), token_);
  EXPECT_EQ((*unverified)->Call("GET", "/healthz").status().code(), StatusCode::kUnavailable);
  // Plain HTTP on the TLS port is no way in.
  std::string plain = daemon_->url();
  plain.replace(0, 5, "http");
  auto http_client = NodeClient::Create(plain, token_);
  EXPECT_FALSE((*http_client)->Call("GET", "/v1/sandboxes").ok());
  // A restart keeps the CA: the same client file still verifies.
  std::string ca_before = *ReadFileToString(ca_file_);
  daemon_->Signal(SIGTERM);
  ASSERT_EQ(daemon_->Wait(30s), std::optional<int>(0));
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--tls=on", "--stop-vms-on-exit"}));
  EXPECT_EQ(*ReadFileToString(ca_file_), ca_before);
  EXPECT_TRUE(client_->Call("GET", "/healthz").ok());
}

TEST_F(NodeDaemonTest, StopVmsOnExitLeavesNothingRunning) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--stop-vms-on-exit"}));
  ASSERT_NO_FATAL_FAILURE(BakeTestGuest());
  for (int i = 0; i < 3; ++i) {
    auto r = client_->Call("POST", "/v1/sandboxes", {{"template", "tg"}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  EXPECT_GE(FindVmmProcesses(KUBICLE_VMM_BIN, dir_).size(), 3u);
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(30s), std::optional<int>(0));
  for (int i = 0; i < 250 && !FindVmmProcesses(KUBICLE_VMM_BIN, dir_).empty(); ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(FindVmmProcesses(KUBICLE_VMM_BIN, dir_).size(), 0u);
}

TEST_F(NodeDaemonTest, ExitCodesForUsageAndSetupFailures) {
  auto run = [&](const std::string& args) {
    std::string cmd = std::string(KUBICLE_NODE_BIN) + " " + args + " >/dev/null 2>&1";
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  EXPECT_EQ(run("serve --help"), 0);
  // No --vmm: the default is kubicle-vmm beside kubicle-node, which the
  // build tree does not have there: a setup failure, not a usage error.
  EXPECT_EQ(run("serve --state-dir " + dir_ + "/s"), 2) << "no kubicle-vmm beside the binary";
  EXPECT_EQ(run("bogus"), 1);
  EXPECT_EQ(run("serve --state-dir " + dir_ + "/s --vmm /nonexistent/vmm"), 2);
  // The listen address is taken.
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::string port = daemon_->url().substr(daemon_->url().rfind(':') + 1);
  EXPECT_EQ(run("serve --no-cgroups --state-dir " + dir_ + "/other --vmm " KUBICLE_VMM_BIN
                " --listen 127.0.0.1:" + port),
            2);
}

}  // namespace
}  // namespace kubicle::noderuntime::daemon
