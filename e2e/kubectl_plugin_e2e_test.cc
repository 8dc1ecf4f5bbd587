// e2e of kubectl-kubicle: the real kubectl runs the plugin (found on PATH as
// kubectl-kubicle, the way krew installs it) against the real control
// plane, the real kubicle-operator and a real kubicle-node serving TLS with
// the test guest. Every verb as a user runs it: wait, exec (exit codes,
// stdin, output), cp both ways, logs and logs -f, top, fork --replicas 3
// --wait, and a sweep after which no Sandbox, SandboxFork or VM is left.
// The plugin reads everything the way a user's client must: the
// kubeconfig, the token Secret, the node's CA from its Lease.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "e2e/e2e_env.h"
#include "kube/json_fields.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The plugin binary: $KUBICLE_E2E_PLUGIN_BIN (a copy a rebuild cannot
// replace mid-test), else the built one.
std::string PluginBin() {
  const char* v = std::getenv("KUBICLE_E2E_PLUGIN_BIN");
  return v && *v ? v : KUBICLE_PLUGIN_BIN;
}

class KubectlPluginE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    KUBICLE_REQUIRE_CLUSTER();
    KUBICLE_REQUIRE_KVM();
    c = NewClient();
    ns = TestNamespace(c.get());
    dir = Cluster()->work_dir() + "/plugin-" + ns;
    // kubectl finds plugins as kubectl-<name> on PATH.
    fs::create_directories(dir + "/bin");
    std::error_code ec;
    fs::remove(dir + "/bin/kubectl-kubicle", ec);
    fs::create_symlink(PluginBin(), dir + "/bin/kubectl-kubicle");
    const char* path = std::getenv("PATH");
    ::setenv("PATH", (dir + "/bin:" + (path ? path : "/usr/bin:/bin")).c_str(), 1);
    auto op = OperatorProcess::Start(ns);
    ASSERT_TRUE(op.ok()) << op.status().ToString();
    operator_ = std::move(*op);
    NodeOptions o;
    o.extra_flags = {"--tls=on"};
    auto n = NodeProcess::Start(ns + "-n", o);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node = std::move(*n);
    TemplateOptions t;
    t.warmup = {{"echo", "warm"}};
    ASSERT_TRUE(CreateTestGuestTemplate(c.get(), ns, "tg", t).ok());
    ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "tg", node->name())) << node->LogTail();
  }
  void TearDown() override {
    if (c && operator_) CleanUpNamespace(c.get(), ns);
    if (HasFailure() && node) std::cerr << "--- node log (tail) ---\n" << node->LogTail() << "\n";
    if (operator_) operator_->Stop();
    node.reset();
  }

  // `kubectl kubicle ARGS... -n NS --kubeconfig=...`; plugin flags go after
  // the plugin's name (kubectl refuses flags before it).
  CommandResult Kubicle(std::vector<std::string> args, const std::string& input = {},
                        bool kubeconfig_flag = true) {
    std::vector<std::string> argv = {Cluster()->bin_dir() + "/kubectl", "kubicle"};
    // Flags before `--` so they are not taken for the command's.
    auto dd = std::find(args.begin(), args.end(), "--");
    std::vector<std::string> flags = {"-n", ns};
    if (kubeconfig_flag) flags.push_back("--kubeconfig=" + Cluster()->kubeconfig_path());
    args.insert(dd, flags.begin(), flags.end());
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, input, 300s);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : CommandResult{};
  }
  void Create(const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    auto r = c->Create(kube::SandboxResource(), ns, SandboxManifest(name, "tg", labels));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  size_t Count(const kube::Resource& r, const std::string& selector) {
    kube::ListOptions o;
    o.label_selector = selector;
    auto l = c->List(r, ns, o);
    return l.ok() ? (*l)["items"].size() : 999;
  }

  std::unique_ptr<kube::HttpKubeClient> c;
  std::string ns, dir;
  std::unique_ptr<OperatorProcess> operator_;
  std::unique_ptr<NodeProcess> node;
};

TEST_F(KubectlPluginE2E, HelpComesThroughKubectl) {
  auto top = Kubicle({"--help"});
  EXPECT_EQ(top.exit_code, 0) << top.output;
  for (const char* verb : {"exec", "cp", "fork", "sweep", "logs", "wait", "top"}) {
    EXPECT_NE(top.output.find(std::string("  ") + verb + " "), std::string::npos) << top.output;
    auto one = Kubicle({verb, "--help"});
    EXPECT_EQ(one.exit_code, 0) << one.output;
    EXPECT_NE(one.output.find(std::string("Usage: kubectl kubicle ") + verb), std::string::npos);
  }
  EXPECT_EQ(Kubicle({"exec", "x", "--nope", "--", "true"}).exit_code, 2);
}

TEST_F(KubectlPluginE2E, WaitExecCpLogsTopOverTheNodesTls) {
  Create("a", {{"kubicle.dev/run", ns + "-r"}});
  auto wait = Kubicle({"wait", "a", "--for=ready", "--timeout=180s"});
  ASSERT_EQ(wait.exit_code, 0) << wait.output;
  EXPECT_NE(wait.output.find("sandbox.kubicle.dev/a condition met"), std::string::npos);
  // The node serves TLS and publishes its CA: the plugin verifies against it.
  auto lease = c->Get(kube::LeaseResource(), kLeaseNs, "kubicle-node-" + node->name());
  ASSERT_TRUE(lease.ok());
  EXPECT_NE(kube::StrAt(*lease, {"metadata", "annotations", "kubicle.dev/serving-ca"})
                .find("BEGIN CERTIFICATE"), std::string::npos);

  // exec: output and the command's exit code, through $KUBECONFIG this time.
  ::setenv("KUBECONFIG", Cluster()->kubeconfig_path().c_str(), 1);
  auto echo = Kubicle({"exec", "a", "--", "echo", "hello", "from", "a"}, {}, false);
  ::unsetenv("KUBECONFIG");
  EXPECT_EQ(echo.exit_code, 0) << echo.output;
  EXPECT_EQ(echo.output, "hello from a\n");
  auto f = Kubicle({"exec", "a", "--", "false"});
  EXPECT_EQ(f.exit_code, 1) << f.output;
  auto nx = Kubicle({"exec", "a", "--", "no-such-command"});
  EXPECT_EQ(nx.exit_code, 127) << nx.output;
  auto cat = Kubicle({"exec", "a", "-i", "--", "cat"}, "piped in\n");
  EXPECT_EQ(cat.exit_code, 0) << cat.output;
  EXPECT_EQ(cat.output, "piped in\n");
  auto missing = Kubicle({"exec", "nope", "--", "true"});
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_NE(missing.output.find("not found"), std::string::npos) << missing.output;

  // cp both ways.
  {
    std::ofstream(dir + "/up.txt") << "a file for the guest\n";
  }
  auto up = Kubicle({"cp", dir + "/up.txt", "a:/work/up.txt"});
  ASSERT_EQ(up.exit_code, 0) << up.output;
  auto in_guest = Kubicle({"exec", "a", "--", "cat", "/work/up.txt"});
  EXPECT_EQ(in_guest.output, "a file for the guest\n");
  auto down = Kubicle({"cp", "a:/work/up.txt", dir + "/down.txt"});
  ASSERT_EQ(down.exit_code, 0) << down.output;
  std::ifstream back(dir + "/down.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(back), {}), "a file for the guest\n");
  EXPECT_NE(Kubicle({"cp", "a:/work/none", dir + "/x"}).exit_code, 0);

  // logs: what the guest wrote to its serial console.
  ASSERT_EQ(Kubicle({"exec", "a", "--", "console", "640"}).exit_code, 0);
  bool flooded = Eventually([&] {
    return Kubicle({"logs", "a"}).output.find("kubicle-testguest: console flood") != std::string::npos;
  }, 60s);
  EXPECT_TRUE(flooded) << Kubicle({"logs", "a"}).output;

  // top: the VM's CPU and memory from its node.
  auto top = Kubicle({"top", "--interval=500ms"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  std::istringstream rows(top.output);
  std::string header, row;
  std::getline(rows, header);
  std::getline(rows, row);
  EXPECT_NE(header.find("CPU(cores)"), std::string::npos) << top.output;
  std::istringstream cols(row);
  std::string name, nodename, cpu, mem, limit, vcpus, guest;
  cols >> name >> nodename >> cpu >> mem >> limit >> vcpus >> guest;
  EXPECT_EQ(name, "a") << top.output;
  EXPECT_EQ(nodename, node->name());
  EXPECT_EQ(cpu.back(), 'm') << top.output;
  EXPECT_GT(std::stoi(mem), 0) << top.output;  // "NNMi"
  EXPECT_EQ(vcpus, "1");
  EXPECT_EQ(guest, "64Mi");

  // logs -f follows until the VM goes away.
  auto follow = std::async(std::launch::async, [&] { return Kubicle({"logs", "a", "-f"}); });
  std::this_thread::sleep_for(2s);
  ASSERT_EQ(Kubicle({"exec", "a", "--", "console", "128"}).exit_code, 0);
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "a").ok());
  ASSERT_EQ(follow.wait_for(240s), std::future_status::ready) << "logs -f did not end with the VM";
  auto followed = follow.get();
  EXPECT_EQ(followed.exit_code, 0) << followed.output;
  EXPECT_NE(followed.output.find("kubicle-testguest: console flood"), std::string::npos);
  EXPECT_NE(followed.output.find("no longer running"), std::string::npos) << followed.output;
  auto gone = Kubicle({"wait", "a", "--for=delete", "--timeout=180s"});
  EXPECT_EQ(gone.exit_code, 0) << gone.output;
}

TEST_F(KubectlPluginE2E, ForkThreeThenSweepLeavesNothing) {
  const std::string run = ns + "-run";
  Create("src", {{"kubicle.dev/run", run}, {"kubicle.dev/agent", "a0"}});
  ASSERT_EQ(Kubicle({"wait", "src", "--for=ready", "--timeout=180s"}).exit_code, 0);
  ASSERT_EQ(Kubicle({"exec", "src", "--", "echo", "warm"}).exit_code, 0);
  auto fork = Kubicle({"fork", "src", "--replicas", "3", "--wait", "--name", "f", "--timeout=300s"});
  ASSERT_EQ(fork.exit_code, 0) << fork.output;
  EXPECT_NE(fork.output.find("sandboxfork.kubicle.dev/f created"), std::string::npos) << fork.output;
  for (int i = 0; i < 3; ++i) {
    const std::string child = "f-" + std::to_string(i);
    EXPECT_NE(fork.output.find("sandbox.kubicle.dev/" + child + " ready"), std::string::npos)
        << fork.output;
    auto host = Kubicle({"exec", child, "--", "echo", child});
    EXPECT_EQ(host.exit_code, 0) << host.output;
    EXPECT_EQ(host.output, child + "\n");
  }
  EXPECT_EQ(node->SandboxVms().size(), 4u);
  EXPECT_EQ(Count(kube::SandboxResource(), "kubicle.dev/run=" + run), 4u);

  auto sweep = Kubicle({"sweep", "--run", run, "--timeout=300s"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.output;
  EXPECT_NE(sweep.output.find("4 Sandboxes deleted, every VM gone"), std::string::npos) << sweep.output;
  // When sweep returns, nothing of the run is left: objects, or VMs on the host.
  EXPECT_EQ(Count(kube::SandboxResource(), "kubicle.dev/run=" + run), 0u);
  EXPECT_EQ(Count(kube::SandboxForkResource(), "kubicle.dev/run=" + run), 0u);
  EXPECT_TRUE(node->SandboxVms().empty());
  // The node releases cgroups and directories a moment after the VM exits.
  NodeLeftovers left;
  EXPECT_TRUE(Eventually([&] {
    left = node->Leftovers();
    return left.empty();
  }, 60s)) << left.ToString();
}

}  // namespace
}  // namespace kubicle::e2e
