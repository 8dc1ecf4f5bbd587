// e2e of kubectl-kubicle: the real kubectl runs the plugin (found on PATH as
// kubectl-kubicle, the way krew installs it) against the real control
// plane, the real kubicle-operator and a real kubicle-node serving TLS with
// the test guest. Every verb as a user runs it: wait, exec (exit codes,
// stdin, output), cp both ways, logs and logs -f, top, fork --replicas 3
// --wait, and a sweep after which no Sandbox, SandboxFork or VM is left;
// per-call runs with the template's run token (RBAC on its Secret is the
// permission, a deleted Secret revokes the token), suspend and resume, and
// port-forward as far as the test guest lets a port go (it has no TCP).
// The plugin reads everything the way a user's client must: the
// kubeconfig, the token Secret, the node's CA from its Lease.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include "common/base64.h"
#include "common/unique_fd.h"
#include "e2e/e2e_env.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/client/node_client.h"

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
  // `kubectl ARGS...` as the admin; fails the test on a non-zero exit.
  void Kubectl(const std::vector<std::string>& args) {
    auto r = Cluster()->Kubectl(args);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->exit_code, 0) << r->output;
  }
  // The plugin with the identity of `kubeconfig` ($KUBECONFIG, no flag).
  CommandResult KubicleAs(const std::string& kubeconfig, std::vector<std::string> args) {
    ::setenv("KUBECONFIG", kubeconfig.c_str(), 1);
    CommandResult r = Kubicle(std::move(args), {}, false);
    ::unsetenv("KUBECONFIG");
    return r;
  }
  std::optional<Json> Sandbox(const std::string& name) {
    auto g = c->Get(kube::SandboxResource(), ns, name);
    return g.ok() ? std::optional<Json>(*g) : std::nullopt;
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

// The token in the template's run-token Secret, or "" while there is none.
std::string RunToken(kube::KubeClient* c, const std::string& ns, const std::string& secret) {
  auto s = c->Get(kube::SecretResource(), ns, secret);
  if (!s.ok()) return "";
  auto t = Base64Decode(kube::StrAt(*s, {"data", "token"}));
  return t.ok() ? std::string(t->begin(), t->end()) : "";
}

TEST_F(KubectlPluginE2E, RunGoesToANodeWithTheTemplatesRunTokenWhichRbacGrantsAndDeletionRevokes) {
  std::string sha;
  ASSERT_TRUE(Eventually([&] {
    auto t = c->Get(kube::SandboxTemplateResource(), ns, "tg");
    sha = t.ok() ? kube::StrAt(*t, {"status", "runTokenSha256"}) : "";
    return !sha.empty();
  }, 60s)) << "the operator published no run token";
  auto hi = Kubicle({"run", "tg", "--", "echo", "hello", "from", "a", "run"});
  EXPECT_EQ(hi.exit_code, 0) << hi.output;
  EXPECT_EQ(hi.output, "hello from a run\n");
  auto env = Kubicle({"run", "tg", "-e", "WHO=a run", "--", "printenv", "WHO"});
  EXPECT_EQ(env.output, "a run\n");
  EXPECT_EQ(Kubicle({"run", "tg", "--", "false"}).exit_code, 1);
  auto cat = Kubicle({"run", "tg", "-i", "--", "cat"}, "into a run\n");
  EXPECT_EQ(cat.exit_code, 0) << cat.output;
  EXPECT_EQ(cat.output, "into a run\n");
  // No Sandbox object, and every VM discarded after its call.
  EXPECT_EQ(Count(kube::SandboxResource(), ""), 0u);
  NodeLeftovers left;
  EXPECT_TRUE(Eventually([&] {
    left = node->Leftovers();
    return left.empty();
  }, 60s)) << left.ToString();
  auto missing = Kubicle({"run", "nope", "--", "true"});
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_NE(missing.output.find("SandboxTemplate \"nope\" not found"), std::string::npos) << missing.output;

  // `get` on the Secret is the permission to run: a ServiceAccount that may
  // read the template and the node's Lease but not the Secret is refused by
  // the apiserver, with its words; granted that one Secret, it runs.
  auto kc = ServiceAccountKubeconfig(ns, "runner");
  ASSERT_TRUE(kc.ok()) << kc.status().ToString();
  const std::string sa = "--serviceaccount=" + ns + ":runner";
  ASSERT_NO_FATAL_FAILURE(Kubectl({"create", "role", "templates", "-n", ns, "--verb=get",
                                   "--resource=sandboxtemplates.kubicle.dev"}));
  ASSERT_NO_FATAL_FAILURE(Kubectl({"create", "rolebinding", "runner-templates", "-n", ns, "--role=templates", sa}));
  ASSERT_NO_FATAL_FAILURE(Kubectl({"create", "role", ns + "-leases", "-n", kLeaseNs, "--verb=get",
                                   "--resource=leases.coordination.k8s.io"}));
  ASSERT_NO_FATAL_FAILURE(Kubectl({"create", "rolebinding", ns + "-runner-leases", "-n", kLeaseNs,
                                   "--role=" + ns + "-leases", sa}));
  CommandResult refused;
  EXPECT_TRUE(Eventually([&] {  // the bindings are in force once the template can be read
    refused = KubicleAs(*kc, {"run", "tg", "--", "echo", "x"});
    return refused.output.find("secrets \"tg-run\" is forbidden") != std::string::npos;
  }, 30s)) << refused.output;
  EXPECT_EQ(refused.exit_code, 125) << refused.output;
  ASSERT_NO_FATAL_FAILURE(Kubectl({"create", "role", "run-tg", "-n", ns, "--verb=get", "--resource=secrets",
                                   "--resource-name=tg-run"}));
  ASSERT_NO_FATAL_FAILURE(Kubectl({"create", "rolebinding", "runner-run-tg", "-n", ns, "--role=run-tg", sa}));
  CommandResult granted;
  EXPECT_TRUE(Eventually([&] {
    granted = KubicleAs(*kc, {"run", "tg", "--", "echo", "granted"});
    return granted.exit_code == 0;
  }, 30s)) << granted.output;
  EXPECT_EQ(granted.output, "granted\n");

  // Deleting the Secret revokes the token: the operator mints another, the
  // node learns its hash from the template, runs go on with the new one,
  // and the old one is refused by the node.
  const std::string old_token = RunToken(c.get(), ns, "tg-run");
  ASSERT_FALSE(old_token.empty());
  ASSERT_TRUE(c->Delete(kube::SecretResource(), ns, "tg-run").ok());
  ASSERT_TRUE(Eventually([&] {
    auto t = c->Get(kube::SandboxTemplateResource(), ns, "tg");
    const std::string now = t.ok() ? kube::StrAt(*t, {"status", "runTokenSha256"}) : "";
    return !now.empty() && now != sha;
  }, 60s)) << "no new run token";
  const std::string new_token = RunToken(c.get(), ns, "tg-run");
  EXPECT_FALSE(new_token.empty());
  EXPECT_NE(new_token, old_token);
  CommandResult again;
  EXPECT_TRUE(Eventually([&] {  // until the node agent has handed the new hash over
    again = Kubicle({"run", "tg", "--", "echo", "new", "token"});
    return again.exit_code == 0;
  }, 60s)) << again.output;
  EXPECT_EQ(again.output, "new token\n");
  auto tmpl = c->Get(kube::SandboxTemplateResource(), ns, "tg");
  ASSERT_TRUE(tmpl.ok());
  const std::string node_template = kube::StrAt(TemplateNodeEntry(*tmpl, node->name()), {"nodeTemplate"});
  ASSERT_FALSE(node_template.empty()) << tmpl->dump();
  const Json run = {{"argv", {"echo", "x"}}};
  auto stale = noderuntime::client::NodeClient::Create(node->url(), old_token, node->ca_file());
  ASSERT_TRUE(stale.ok()) << stale.status().ToString();
  auto r = (*stale)->Call("POST", "/v1/templates/" + node_template + "/run", run);
  EXPECT_FALSE(r.ok()) << "the revoked token still runs: " << r->dump();
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
  auto fresh = noderuntime::client::NodeClient::Create(node->url(), new_token, node->ca_file());
  ASSERT_TRUE(fresh.ok());
  auto ok = (*fresh)->Call("POST", "/v1/templates/" + node_template + "/run", run);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(kube::StrAt(*ok, {"stdout"}), "x\n") << ok->dump();
}

TEST_F(KubectlPluginE2E, SuspendAndResumeKeepTheVmsMemoryAndFiles) {
  Create("a");
  ASSERT_EQ(Kubicle({"wait", "a", "--for=ready", "--timeout=180s"}).exit_code, 0);
  const std::string id = VmId(*Sandbox("a"));
  // The test guest's files live in its RAM: they survive only if the
  // guest's memory does.
  ASSERT_EQ(Kubicle({"cp", "-", "a:/work/kept.txt"}, "written before the suspend\n").exit_code, 0);
  auto vm = node->VmProcess(id);
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();

  auto suspend = Kubicle({"suspend", "a", "--timeout=180s"});
  ASSERT_EQ(suspend.exit_code, 0) << suspend.output;
  EXPECT_EQ(suspend.output, "sandbox.kubicle.dev/a suspended\n");
  // When it says so, the object says so and the VM process is gone.
  auto s = Sandbox("a");
  ASSERT_TRUE(s);
  EXPECT_EQ(Phase(*s), "Suspended") << s->dump();
  EXPECT_TRUE(kube::At(*s, {"spec", "suspend"}) == true) << s->dump();
  EXPECT_TRUE(Eventually([&] { return !Alive(*vm); }, 30s)) << "the VM process outlived the suspend";
  EXPECT_TRUE(node->SandboxVms().empty());
  auto refused = Kubicle({"exec", "a", "--", "echo", "hi"});
  EXPECT_EQ(refused.exit_code, 125) << refused.output;
  EXPECT_NE(refused.output.find("Suspended"), std::string::npos) << refused.output;
  auto again = Kubicle({"suspend", "a", "--timeout=60s"});  // idempotent
  EXPECT_EQ(again.exit_code, 0) << again.output;

  auto resume = Kubicle({"resume", "a", "--timeout=180s"});
  ASSERT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_EQ(resume.output, "sandbox.kubicle.dev/a resumed\n");
  s = Sandbox("a");
  ASSERT_TRUE(s);
  EXPECT_EQ(Phase(*s), "Running") << s->dump();
  EXPECT_EQ(VmId(*s), id);
  EXPECT_EQ(node->SandboxVms(), std::vector<std::string>{id});
  auto kept = Kubicle({"exec", "a", "--", "cat", "/work/kept.txt"});
  EXPECT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_EQ(kept.output, "written before the suspend\n");
  auto echo = Kubicle({"exec", "a", "--", "echo", "resumed"});
  EXPECT_EQ(echo.output, "resumed\n");
  auto nope = Kubicle({"suspend", "nope"});
  EXPECT_EQ(nope.exit_code, 1) << nope.output;
  EXPECT_NE(nope.output.find("Sandbox \"nope\" not found"), std::string::npos) << nope.output;
}

// A loopback connection to `port` whose reads give up after `timeout`.
UniqueFd ConnectLocal(int port, std::chrono::seconds timeout) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return UniqueFd();
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// What ends a local connection: "eof", "reset", or "timeout" (no end).
std::string ReadUntilClosed(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return "eof";
    if (n > 0) continue;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? "timeout" : "reset";
  }
}

// The test guest answers ARP and ping but has no TCP (docs/testguest.md),
// so no port stream can reach a listener in it; what this proves is the
// whole way there: the plugin's listener, the Sandbox's endpoint and token
// and the Lease's CA found through Kubernetes, the node's TLS, the upgrade
// accepted for this Sandbox with its token, and the node connecting to the
// guest's address inside this Sandbox's own network namespace, to which
// the guest never answers: 504 after the node's 10 s connect timeout, the
// local connection closed and the node's reason printed. A suspended
// Sandbox's port is refused at once (409). Bytes relayed to a real
// listener are the linux tier's (e2e/nested/node-network-test.py).
TEST_F(KubectlPluginE2E, PortForwardReachesTheGuestsAddressInItsNamespaceThroughTheNode) {
  Create("a");
  ASSERT_EQ(Kubicle({"wait", "a", "--for=ready", "--timeout=180s"}).exit_code, 0);
  const std::string log = dir + "/port-forward.log";
  std::vector<std::string> argv = {Cluster()->bin_dir() + "/kubectl", "kubicle", "port-forward", "a", ":3000",
                                   "-n", ns, "--kubeconfig=" + Cluster()->kubeconfig_path()};
  auto fwd = ChildProcess::Spawn(argv, log);
  ASSERT_TRUE(fwd.ok()) << fwd.status().ToString();
  auto log_text = [&] {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  int local_port = 0;
  ASSERT_TRUE(Eventually([&] {
    const std::string t = log_text();
    const std::string prefix = "Forwarding from 127.0.0.1:";
    auto at = t.find(prefix);
    auto end = at == std::string::npos ? at : t.find(" -> 3000\n", at);
    if (end == std::string::npos) return false;
    local_port = std::stoi(t.substr(at + prefix.size(), end - at - prefix.size()));
    return true;
  }, 60s)) << log_text();

  UniqueFd conn = ConnectLocal(local_port, 120s);
  ASSERT_TRUE(conn.valid()) << "nothing listens on " << local_port << ": " << log_text();
  const std::string hello = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(::send(conn.get(), hello.data(), hello.size(), MSG_NOSIGNAL), ssize_t(hello.size()));
  EXPECT_NE(ReadUntilClosed(conn.get()), "timeout") << log_text();
  std::string why = "the node answered 504: ";
  EXPECT_TRUE(Eventually([&] { return log_text().find(why) != std::string::npos; }, 30s)) << log_text();
  EXPECT_NE(log_text().find("connecting to 172.16.0.2:3000: no answer within 10000 ms"), std::string::npos)
      << log_text();

  // The forwarder goes on: a suspended Sandbox's port is refused at once.
  ASSERT_EQ(Kubicle({"suspend", "a", "--timeout=180s"}).exit_code, 0);
  conn = ConnectLocal(local_port, 120s);
  ASSERT_TRUE(conn.valid()) << "the forwarder stopped: " << log_text();
  EXPECT_NE(ReadUntilClosed(conn.get()), "timeout") << log_text();
  EXPECT_TRUE(Eventually([&] { return log_text().find("the node answered 409: ") != std::string::npos; }, 30s))
      << log_text();
  EXPECT_TRUE(fwd->Running()) << log_text();
  fwd->Stop(10s);
}
}  // namespace
}  // namespace kubicle::e2e
