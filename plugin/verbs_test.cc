// The verbs against an in-memory apiserver (FakeKubeClient) and a real
// node API listener over FakeSandboxService: what a user sees (output,
// exit codes) and what each verb changes.
#include "plugin/verbs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <future>

#include "kube/fake_kube_client.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/server/api_server.h"
#include "noderuntime/api/codec.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "noderuntime/server/serving_cert.h"
#include "plugin/port_forward.h"

namespace kubicle::plugin {
namespace {

using kube::Json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    noderuntime::server::ApiServerOptions opts;
    opts.admin_token = "admin";
    opts.console_poll_interval = 10ms;
    opts.console_heartbeat = 100ms;
    server_ = std::make_unique<noderuntime::server::ApiServer>(&node_, &registry_, opts);
    Status st = Status::Unavailable("no attempt");
    for (int i = 0; i < 5 && !st.ok(); ++i) {
      auto port = noderuntime::server::PickFreePort();
      ASSERT_TRUE(port.ok());
      endpoint_ = "127.0.0.1:" + std::to_string(*port);
      st = server_->Start("127.0.0.1", *port);
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(node_.PutTemplate({.name = "tg", .kernel = "/guest", .mem_mib = 64}).ok());
    ASSERT_TRUE(kube_.Create(kube::LeaseResource(), "kubicle-node-lease",
                             {{"metadata", {{"name", "kubicle-node-n1"}}}}).ok());
    env_.kube = &kube_;
    env_.ns = "ns";
    env_.in = &in_;
    env_.out = &out_;
    env_.err = &err_;
  }
  void TearDown() override { server_->Stop(); }

  // A Running Sandbox `name` with its VM on the fake node and its Secret.
  std::string AddSandbox(const std::string& name, const Json& labels = Json::object()) {
    auto obj = kube_.Create(kube::SandboxResource(), "ns",
                            {{"metadata", {{"name", name}, {"labels", labels}}},
                             {"spec", {{"templateRef", {{"name", "tg"}}}}}});
    EXPECT_TRUE(obj.ok());
    const std::string vm = "k-" + kube::StrAt(*obj, {"metadata", "uid"});
    noderuntime::SandboxSpec spec;
    spec.id = vm;
    spec.template_name = "tg";
    auto sb = node_.CreateSandbox(spec);
    EXPECT_TRUE(sb.ok()) << sb.status().ToString();
    const auto* t = reinterpret_cast<const uint8_t*>(sb->token.data());
    EXPECT_TRUE(kube_.Create(kube::SecretResource(), "ns",
                             {{"metadata", {{"name", name + "-token"}}},
                              {"data", {{"token", noderuntime::api::Base64Encode({t, sb->token.size()})}}}})
                    .ok());
    Json status{{"phase", "Running"},
                {"nodeName", "n1"},
                {"tokenSecretName", name + "-token"},
                {"vm", {{"state", "Running"}, {"endpoint", endpoint_}}},
                {"conditions", {{{"type", "Ready"}, {"status", "True"}, {"reason", "Running"}}}}};
    EXPECT_TRUE(kube_.Patch(kube::SandboxResource(), "ns", name, kube::PatchType::kMerge,
                            {{"status", status}}, "status").ok());
    return vm;
  }

  int Run(const std::vector<std::string>& args) {
    out_.str("");
    err_.str("");
    auto inv = ParseArgs(args);
    EXPECT_TRUE(inv.ok()) << inv.status().ToString();
    return inv.ok() ? RunVerb(*inv, env_) : -1;
  }

  noderuntime::server::testing::FakeSandboxService node_;
  metrics::Registry registry_;
  std::unique_ptr<noderuntime::server::ApiServer> server_;
  std::string endpoint_;
  kube::FakeKubeClient kube_;
  std::istringstream in_;
  std::ostringstream out_, err_;
  Env env_;
};

TEST_F(VerbsTest, ExecStreamsAndExitsWithTheCommandsCode) {
  AddSandbox("a");
  EXPECT_EQ(Run({"exec", "a", "--", "echo", "hello", "world"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "hello world\n");
  EXPECT_EQ(Run({"exec", "a", "--", "fail", "7"}), 7);
  EXPECT_EQ(Run({"exec", "a", "--", "no-such-command"}), 127);
  // -i: our stdin reaches the command; env and cwd go with it.
  node_.exec_hook = [](const std::string&, const noderuntime::ExecOptions& o) {
    guest::client::ExecResult r;
    o.io.on_output(guest::protocol::OutputStream::kStdout, o.request.stdin_data);
    for (const auto& e : o.request.env) {
      o.io.on_output(guest::protocol::OutputStream::kStderr,
                     guest::protocol::ByteSpan(reinterpret_cast<const uint8_t*>(e.data()), e.size()));
    }
    r.exit_code = o.request.cwd == "/work" ? 3 : 4;
    return Result<guest::client::ExecResult>(r);
  };
  in_.str("from stdin");
  EXPECT_EQ(Run({"exec", "a", "-i", "-e", "K=V", "--cwd", "/work", "--", "cat"}), 3);
  EXPECT_EQ(out_.str(), "from stdin");
  EXPECT_EQ(err_.str(), "K=V");
  node_.exec_hook = [](const std::string&, const noderuntime::ExecOptions&) {
    guest::client::ExecResult r;
    r.timed_out = true;
    return Result<guest::client::ExecResult>(r);
  };
  EXPECT_EQ(Run({"exec", "a", "--timeout", "2s", "--", "sleep"}), 124);
  node_.exec_hook = [](const std::string&, const noderuntime::ExecOptions&) {
    guest::client::ExecResult r;
    r.signal = 9;
    return Result<guest::client::ExecResult>(r);
  };
  EXPECT_EQ(Run({"exec", "a", "--", "x"}), 137);
}

TEST_F(VerbsTest, ExecRefusalsAndItsOwnFailures) {
  AddSandbox("a");
  EXPECT_EQ(Run({"exec", "a", "echo"}), kExitUsage);  // no --
  EXPECT_NE(err_.str().find("after --"), std::string::npos);
  EXPECT_EQ(Run({"exec", "a", "-t", "--", "echo"}), kExitUsage);
  EXPECT_EQ(Run({"exec", "a", "-e", "novalue", "--", "echo"}), kExitUsage);
  EXPECT_EQ(Run({"exec", "nope", "--", "echo"}), kExecFailed);
  EXPECT_NE(err_.str().find("\"nope\" not found in namespace ns"), std::string::npos) << err_.str();
  // A wrong token in the Secret: the node refuses it.
  ASSERT_TRUE(kube_.Patch(kube::SecretResource(), "ns", "a-token", kube::PatchType::kMerge,
                          {{"data", {{"token", "d3Jvbmc="}}}}).ok());
  EXPECT_EQ(Run({"exec", "a", "--", "echo"}), kExecFailed);
  EXPECT_NE(err_.str().find("401"), std::string::npos) << err_.str();
}

TEST_F(VerbsTest, CpBothWays) {
  AddSandbox("a");
  const fs::path dir = fs::temp_directory_path() / ("plugin-cp-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.txt") << "payload\n";
  fs::permissions(dir / "in.txt", fs::perms(0600));
  EXPECT_EQ(Run({"cp", (dir / "in.txt").string(), "a:/work/in.txt"}), 0) << err_.str();
  const std::string vm = "k-" + kube::StrAt(*kube_.Get(kube::SandboxResource(), "ns", "a"), {"metadata", "uid"});
  EXPECT_EQ(node_.file_mode(vm, "/work/in.txt"), 0600u);
  EXPECT_EQ(Run({"cp", "a:/work/in.txt", (dir / "out.txt").string()}), 0) << err_.str();
  std::ifstream back(dir / "out.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(back), {}), "payload\n");
  // Into a directory: its base name; "-" is stdout.
  EXPECT_EQ(Run({"cp", "a:/work/in.txt", dir.string()}), 0);
  EXPECT_TRUE(fs::exists(dir / "in.txt"));
  EXPECT_EQ(Run({"cp", "a:/work/in.txt", "-"}), 0);
  EXPECT_EQ(out_.str(), "payload\n");
  in_.str("from stdin");
  EXPECT_EQ(Run({"cp", "-", "a:/x"}), 0);
  EXPECT_EQ(Run({"cp", "a:/x", "-"}), 0);
  EXPECT_EQ(out_.str(), "from stdin");
  EXPECT_EQ(Run({"cp", "a:/missing", "-"}), kExitFailed);
  EXPECT_NE(err_.str().find("404"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"cp", "a:/x", "a:/y"}), kExitUsage);
  EXPECT_EQ(Run({"cp", "a:relative", "-"}), kExitUsage);
  EXPECT_EQ(Run({"cp", dir.string(), "a:/d"}), kExitFailed);  // a directory
  fs::remove_all(dir);
}

// ws/NAME:/path reaches a Workspace's disk by the node's name for it
// (status.disk.id) with the token of its Secret; the node refuses while a
// sandbox holds it.
TEST_F(VerbsTest, CpReachesAWorkspacesDiskWithoutAVm) {
  auto minted = node_.PutWorkspace({.name = "w-1a2b", .size_mib = 16});
  ASSERT_TRUE(minted.ok()) << minted.status().ToString();
  const auto* t = reinterpret_cast<const uint8_t*>(minted->token.data());
  ASSERT_TRUE(kube_.Create(kube::SecretResource(), "ns",
                           {{"metadata", {{"name", "data-workspace-token"}}},
                            {"data", {{"token", noderuntime::api::Base64Encode({t, minted->token.size()})}}}})
                  .ok());
  ASSERT_TRUE(kube_.Create(kube::WorkspaceResource(), "ns", {{"metadata", {{"name", "data"}}}, {"spec", {{"sizeMiB", 16}}}})
                  .ok());
  ASSERT_TRUE(kube_.Patch(kube::WorkspaceResource(), "ns", "data", kube::PatchType::kMerge,
                          {{"status", {{"phase", "Ready"}, {"nodeName", "n1"},
                                       {"tokenSecretName", "data-workspace-token"},
                                       {"disk", {{"id", "w-1a2b"}, {"endpoint", endpoint_}}}}}},
                          "status").ok());
  in_.str("notes\n");
  EXPECT_EQ(Run({"cp", "-", "ws/data:/notes.txt"}), 0) << err_.str();
  EXPECT_EQ(Run({"cp", "workspace/data:/notes.txt", "-"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "notes\n");
  EXPECT_EQ(Run({"cp", "ws/nope:/notes.txt", "-"}), kExitFailed);
  EXPECT_NE(err_.str().find("Workspace \"nope\" not found"), std::string::npos) << err_.str();
  noderuntime::SandboxSpec holder;
  holder.id = "holder";
  holder.template_name = "tg";
  holder.workspace = "w-1a2b";
  ASSERT_TRUE(node_.CreateSandbox(holder).ok());
  EXPECT_EQ(Run({"cp", "ws/data:/notes.txt", "-"}), kExitFailed);
  EXPECT_NE(err_.str().find("409"), std::string::npos) << err_.str();
}

TEST_F(VerbsTest, LogsPrintsAndFollowsTheConsole) {
  const std::string vm = AddSandbox("a");
  node_.AppendConsole(vm, "boot\n");
  EXPECT_EQ(Run({"logs", "a"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "boot\n");
  std::thread writer([&] {
    std::this_thread::sleep_for(150ms);
    node_.AppendConsole(vm, "later\n");
    std::this_thread::sleep_for(150ms);
    node_.FailSandbox(vm, "kubicle-vmm exit code 3");
  });
  EXPECT_EQ(Run({"logs", "a", "-f"}), 0) << err_.str();
  writer.join();
  EXPECT_EQ(out_.str(), "boot\nlater\n");
  EXPECT_NE(err_.str().find("no longer running (Failed: kubicle-vmm exit code 3)"), std::string::npos)
      << err_.str();
}

TEST_F(VerbsTest, TopShowsEachRunningSandbox) {
  const std::string a = AddSandbox("a", {{"kubicle.dev/run", "r"}});
  AddSandbox("b");
  std::atomic<bool> stop{false};
  // CPU time moving at half a core while top samples.
  std::thread burner([&] {
    auto t0 = std::chrono::steady_clock::now();
    while (!stop) {
      noderuntime::SandboxStats s;
      s.cpu_usage_ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count() / 2);
      s.memory_bytes = 70u << 20;
      s.memory_limit_bytes = 128u << 20;
      node_.SetStats(a, s);
      std::this_thread::sleep_for(5ms);
    }
  });
  // Long enough that a stall of the burner (it writes every 5 ms) moves the
  // figure by little.
  EXPECT_EQ(Run({"top", "-l", "kubicle.dev/run=r", "--interval", "2s"}), 0) << err_.str();
  stop = true;
  burner.join();
  std::istringstream lines(out_.str());
  std::string header, row, extra;
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_FALSE(std::getline(lines, extra)) << out_.str();  // b is not in the run
  EXPECT_NE(header.find("CPU(cores)"), std::string::npos);
  std::istringstream cols(row);
  std::string name, node, cpu, mem, limit, vcpus, guest;
  cols >> name >> node >> cpu >> mem >> limit >> vcpus >> guest;
  EXPECT_EQ(name, "a");
  EXPECT_EQ(node, "n1");
  const int milli = std::stoi(cpu);
  EXPECT_GT(milli, 300) << row;  // ~500m, whatever the machine's load
  EXPECT_LT(milli, 700) << row;
  EXPECT_EQ(mem, "70Mi");
  EXPECT_EQ(limit, "128Mi");
  EXPECT_EQ(vcpus, "1");
  EXPECT_EQ(guest, "64Mi");
  EXPECT_EQ(FormatMillicores(0, 250000000, 1s), "250m");
  EXPECT_EQ(FormatMebibytes(3u << 20), "3Mi");
}

TEST_F(VerbsTest, WaitForReadyAndForDelete) {
  AddSandbox("a");
  EXPECT_EQ(Run({"wait", "a", "--for=ready"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "sandbox.kubicle.dev/a condition met\n");
  EXPECT_EQ(Run({"wait", "nope", "--for=ready", "--timeout=2s"}), kExitFailed);
  EXPECT_NE(err_.str().find("not found"), std::string::npos);
  // Becomes Ready later: the watch sees it.
  ASSERT_TRUE(kube_.Create(kube::SandboxResource(), "ns", {{"metadata", {{"name", "late"}}}}).ok());
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    (void)kube_.Patch(kube::SandboxResource(), "ns", "late", kube::PatchType::kMerge,
                      {{"status", {{"phase", "Running"},
                                   {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}},
                      "status");
  });
  EXPECT_EQ(Run({"wait", "late", "--for=ready", "--timeout=20s"}), 0) << err_.str();
  later.join();
  // A failed Sandbox ends the wait with its reason.
  ASSERT_TRUE(kube_.Patch(kube::SandboxResource(), "ns", "late", kube::PatchType::kMerge,
                          {{"status", {{"phase", "Failed"},
                                       {"conditions", {{{"type", "Ready"}, {"status", "False"},
                                                        {"reason", "VMFailed"}, {"message", "boom"}}}}}}},
                          "status").ok());
  EXPECT_EQ(Run({"wait", "late", "--for=ready"}), kExitFailed);
  EXPECT_NE(err_.str().find("VMFailed: boom"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"wait", "late", "--for=sleepy"}), kExitUsage);
  ASSERT_TRUE(kube_.Delete(kube::SandboxResource(), "ns", "late").ok());
  EXPECT_EQ(Run({"wait", "late", "--for=delete", "--timeout=5s"}), 0) << err_.str();
}

TEST_F(VerbsTest, SuspendAndResumePatchSpecAndWait) {
  AddSandbox("a");
  // What the node and operator would do with spec.suspend.
  std::atomic<bool> stop{false};
  std::thread node([&] {
    while (!stop) {
      auto s = kube_.Get(kube::SandboxResource(), "ns", "a");
      if (s.ok()) {
        const bool want = kube::At(*s, {"spec", "suspend"}).is_boolean() && (*s)["spec"]["suspend"].get<bool>();
        const std::string phase = kube::StrAt(*s, {"status", "phase"});
        if (want && phase != "Suspended") {
          (void)kube_.Patch(kube::SandboxResource(), "ns", "a", kube::PatchType::kMerge,
                            {{"status", {{"phase", "Suspended"},
                                         {"conditions", {{{"type", "Ready"}, {"status", "False"}}}}}}},
                            "status");
        } else if (!want && phase == "Suspended") {
          (void)kube_.Patch(kube::SandboxResource(), "ns", "a", kube::PatchType::kMerge,
                            {{"status", {{"phase", "Running"},
                                         {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}},
                            "status");
        }
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  EXPECT_EQ(Run({"suspend", "a", "--timeout=20s"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "sandbox.kubicle.dev/a suspended\n");
  EXPECT_EQ((*kube_.Get(kube::SandboxResource(), "ns", "a"))["spec"]["suspend"], true);
  EXPECT_EQ(Run({"resume", "a", "--timeout=20s"}), 0) << err_.str();
  EXPECT_EQ((*kube_.Get(kube::SandboxResource(), "ns", "a"))["spec"]["suspend"], false);
  stop = true;
  node.join();
  EXPECT_EQ(Run({"suspend", "a", "--wait=false"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("suspend requested"), std::string::npos);
  EXPECT_EQ(Run({"suspend", "nope"}), kExitFailed);
  EXPECT_NE(err_.str().find("not found"), std::string::npos);
  EXPECT_EQ(Run({"resume"}), kExitUsage);
  EXPECT_EQ(Run({"suspend", "a", "b"}), kExitUsage);
}

TEST_F(VerbsTest, ForkCreatesASandboxForkAndWaitsForItsChildren) {
  AddSandbox("src", {{"kubicle.dev/run", "r1"}, {"kubicle.dev/agent", "a0"}, {"other", "x"}});
  // What the operator would do: children labelled fork-of, Ready one by one.
  std::thread op([&] {
    for (int i = 0; i < 200; ++i) {
      if (kube_.Get(kube::SandboxForkResource(), "ns", "f1").ok()) break;
      std::this_thread::sleep_for(10ms);
    }
    for (int i = 0; i < 3; ++i) {
      const std::string n = "f1-" + std::to_string(i);
      (void)kube_.Create(kube::SandboxResource(), "ns",
                         {{"metadata", {{"name", n}, {"labels", {{"kubicle.dev/fork-of", "f1"}}}}}});
      std::this_thread::sleep_for(50ms);
      (void)kube_.Patch(kube::SandboxResource(), "ns", n, kube::PatchType::kMerge,
                        {{"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}},
                        "status");
    }
  });
  EXPECT_EQ(Run({"fork", "src", "--replicas", "3", "--wait", "--name", "f1", "-l", "tier=b",
                 "--timeout", "30s"}), 0)
      << err_.str();
  op.join();
  EXPECT_EQ(out_.str(),
            "sandboxfork.kubicle.dev/f1 created\nsandbox.kubicle.dev/f1-0 ready\n"
            "sandbox.kubicle.dev/f1-1 ready\nsandbox.kubicle.dev/f1-2 ready\n");
  auto fork = kube_.Get(kube::SandboxForkResource(), "ns", "f1");
  ASSERT_TRUE(fork.ok());
  EXPECT_EQ((*fork)["spec"]["sourceRef"]["name"], "src");
  EXPECT_EQ((*fork)["spec"]["replicas"], 3);
  EXPECT_EQ((*fork)["spec"]["childMetadata"]["labels"]["tier"], "b");
  EXPECT_EQ((*fork)["metadata"]["labels"], (Json{{"kubicle.dev/run", "r1"}, {"kubicle.dev/agent", "a0"}}));
  // Without --wait it returns at once, with a generated name.
  EXPECT_EQ(Run({"fork", "src", "--replicas=1"}), 0);
  EXPECT_EQ(out_.str().rfind("sandboxfork.kubicle.dev/src-f", 0), 0u) << out_.str();
  EXPECT_EQ(Run({"fork", "src", "--replicas=0"}), kExitUsage);
  EXPECT_EQ(Run({"fork", "src"}), kExitUsage);
  EXPECT_EQ(Run({"fork", "nope", "--replicas=1"}), kExitFailed);
}

TEST_F(VerbsTest, SweepDeletesTheRunAndWaitsUntilEveryOneIsGone) {
  AddSandbox("r-0", {{"kubicle.dev/run", "r1"}});
  AddSandbox("r-1", {{"kubicle.dev/run", "r1"}});
  AddSandbox("keep", {{"kubicle.dev/run", "r2"}});
  ASSERT_TRUE(kube_.Create(kube::SandboxForkResource(), "ns",
                           {{"metadata", {{"name", "f"}, {"labels", {{"kubicle.dev/run", "r1"}}}}},
                            {"spec", {{"sourceRef", {{"name", "r-0"}}}, {"replicas", 1}}}}).ok());
  // r-1's VM takes a while to go: the finalizer is held until the node is done.
  ASSERT_TRUE(kube_.Patch(kube::SandboxResource(), "ns", "r-1", kube::PatchType::kMerge,
                          {{"metadata", {{"finalizers", {"kubicle.dev/vm-teardown"}}}}}).ok());
  std::thread node([&] {
    std::this_thread::sleep_for(300ms);
    (void)kube_.Patch(kube::SandboxResource(), "ns", "r-1", kube::PatchType::kMerge,
                      {{"metadata", {{"finalizers", Json::array()}}}});
  });
  EXPECT_EQ(Run({"sweep", "--run", "r1", "--timeout", "30s"}), 0) << err_.str();
  node.join();
  EXPECT_EQ(out_.str(), "run r1: 2 Sandboxes deleted, every VM gone\n");
  EXPECT_FALSE(kube_.Get(kube::SandboxResource(), "ns", "r-1").ok());
  EXPECT_FALSE(kube_.Get(kube::SandboxForkResource(), "ns", "f").ok());
  EXPECT_TRUE(kube_.Get(kube::SandboxResource(), "ns", "keep").ok());
  EXPECT_EQ(Run({"sweep"}), kExitUsage);
  EXPECT_EQ(Run({"sweep", "--run", "a,b"}), kExitUsage);
  // A VM that never goes: the timeout names what is left.
  ASSERT_TRUE(kube_.Patch(kube::SandboxResource(), "ns", "keep", kube::PatchType::kMerge,
                          {{"metadata", {{"finalizers", {"kubicle.dev/vm-teardown"}}}}}).ok());
  EXPECT_EQ(Run({"sweep", "--run", "r2", "--timeout", "1s"}), kExitFailed);
  EXPECT_NE(err_.str().find("keep"), std::string::npos) << err_.str();
}

// --- port-forward -------------------------------------------------------

// A listener on 127.0.0.1 standing in for a server in the guest (the fake
// node connects the port route there): echoes each connection on a thread.
class EchoGuest {
 public:
  EchoGuest() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        conns_.emplace_back([c] {
          char buf[65536];
          ssize_t n;
          while ((n = ::recv(c, buf, sizeof buf, 0)) > 0) ::send(c, buf, size_t(n), MSG_NOSIGNAL);
          ::close(c);
        });
      }
    });
  }
  ~EchoGuest() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    for (auto& t : conns_) t.join();
    ::close(fd_);
  }
  uint16_t port = 0;

 private:
  int fd_;
  std::thread thread_;
  std::vector<std::thread> conns_;
};

// A client of the forwarded local port; -1 when nothing listens.
int ConnectLocal(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

std::string Echoed(int fd, const std::string& data) {
  if (::send(fd, data.data(), data.size(), MSG_NOSIGNAL) != ssize_t(data.size())) return "";
  std::string got;
  char buf[65536];
  while (got.size() < data.size()) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

// Runs `port-forward` on a thread until Stop(); Connect() waits (bounded)
// for its listener.
class ForwardRun {
 public:
  ForwardRun(std::function<int(const std::vector<std::string>&)> run,
             std::vector<std::string> args, Env& env) {
    auto stopped = stop_.get_future().share();
    env.wait_for_stop = [stopped] { stopped.wait(); };
    thread_ = std::thread([this, run, args] { code_ = run(args); });
  }
  ~ForwardRun() { Stop(); }
  int Connect(int port) {
    for (int i = 0; i < 500; ++i) {
      int fd = ConnectLocal(port);
      if (fd >= 0) return fd;
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
  int Stop() {
    if (thread_.joinable()) {
      stop_.set_value();
      thread_.join();
    }
    return code_;
  }

 private:
  std::promise<void> stop_;
  std::thread thread_;
  std::atomic<int> code_{-1};
};

TEST(PortPair, ParsedStrictly) {
  auto both = ParsePortPair("8080:3000");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->local, 8080);
  EXPECT_EQ(both->remote, 3000);
  EXPECT_EQ(ParsePortPair("3000")->local, 3000);
  EXPECT_EQ(ParsePortPair("3000")->remote, 3000);
  EXPECT_EQ(ParsePortPair(":3000")->local, 0);
  for (const char* bad : {"", ":", "3000:", "0:80", "80:0", "65536", "a:80", "80:b", "1:2:3",
                          "080:80", " 80"}) {
    EXPECT_FALSE(ParsePortPair(bad).ok()) << bad;
  }
}

TEST_F(VerbsTest, PortForwardRelaysEachLocalConnectionToTheGuestPort) {
  const std::string vm = AddSandbox("a");
  node_.SetGuestNetwork(vm, "127.0.0.1");
  EchoGuest guest;
  const int local = *noderuntime::server::PickFreePort();
  ForwardRun fwd([this](const auto& a) { return Run(a); },
                 {"port-forward", "a", std::to_string(local) + ":" + std::to_string(guest.port)},
                 env_);
  int c1 = fwd.Connect(local);
  ASSERT_GE(c1, 0);
  int c2 = ConnectLocal(local);
  ASSERT_GE(c2, 0);
  EXPECT_EQ(Echoed(c1, "one"), "one");
  EXPECT_EQ(Echoed(c2, std::string(300000, 'x')), std::string(300000, 'x'));
  EXPECT_EQ(Echoed(c1, "again"), "again");
  EXPECT_EQ(fwd.Stop(), 0);
  char b;
  EXPECT_LE(::recv(c1, &b, 1, 0), 0) << "stopping ends the streams";
  ::close(c1);
  ::close(c2);
  EXPECT_NE(out_.str().find("Forwarding from 127.0.0.1:" + std::to_string(local) + " -> " +
                            std::to_string(guest.port)),
            std::string::npos)
      << out_.str();
  EXPECT_LT(ConnectLocal(local), 0) << "nothing listens after the verb ends";
}

TEST_F(VerbsTest, PortForwardClosesARefusedConnectionAndSaysWhy) {
  AddSandbox("a");  // no network on the fake node
  const int local = *noderuntime::server::PickFreePort();
  ForwardRun fwd([this](const auto& a) { return Run(a); },
                 {"port-forward", "a", std::to_string(local) + ":3000"}, env_);
  int c = fwd.Connect(local);
  ASSERT_GE(c, 0);
  char b;
  EXPECT_LE(::recv(c, &b, 1, 0), 0);
  ::close(c);
  EXPECT_EQ(fwd.Stop(), 0);
  EXPECT_NE(err_.str().find("409"), std::string::npos) << err_.str();
  EXPECT_NE(err_.str().find("has no network"), std::string::npos) << err_.str();
}

TEST_F(VerbsTest, PortForwardUsageAndMissingSandbox) {
  EXPECT_EQ(Run({"port-forward", "a"}), kExitUsage);
  EXPECT_EQ(Run({"port-forward", "a", "0:80"}), kExitUsage);
  EXPECT_NE(err_.str().find("LOCAL:REMOTE"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"port-forward", "nope", "8080:80"}), kExitFailed);
  EXPECT_NE(err_.str().find("not found"), std::string::npos) << err_.str();
}

TEST_F(VerbsTest, PortForwardOverTlsVerifiesTheNodesCa) {
  // A second node API, on TLS, whose CA the Lease publishes.
  auto ca = *noderuntime::server::MakeCa("node CA", 24h);
  auto leaf = *noderuntime::server::MakeServingCert(ca, {"127.0.0.1"}, 24h);
  noderuntime::server::ApiServerOptions o;
  o.admin_token = "admin";
  o.tls_cert_pem = leaf.cert_pem + ca.cert_pem;
  o.tls_key_pem = leaf.key_pem;
  metrics::Registry registry;
  noderuntime::server::ApiServer tls_server(&node_, &registry, o);
  const int node_port = *noderuntime::server::PickFreePort();
  ASSERT_TRUE(tls_server.Start("127.0.0.1", node_port).ok());
  endpoint_ = "127.0.0.1:" + std::to_string(node_port);
  const std::string vm = AddSandbox("a");
  node_.SetGuestNetwork(vm, "127.0.0.1");
  ASSERT_TRUE(kube_.Patch(kube::LeaseResource(), "kubicle-node-lease", "kubicle-node-n1",
                          kube::PatchType::kMerge,
                          {{"metadata",
                            {{"annotations", {{"kubicle.dev/serving-ca", ca.cert_pem}}}}}})
                  .ok());
  EchoGuest guest;
  {
    const int local = *noderuntime::server::PickFreePort();
    ForwardRun fwd([this](const auto& a) { return Run(a); },
                   {"port-forward", "a", std::to_string(local) + ":" + std::to_string(guest.port)},
                   env_);
    int c = fwd.Connect(local);
    ASSERT_GE(c, 0);
    EXPECT_EQ(Echoed(c, "over tls"), "over tls");
    EXPECT_EQ(Echoed(c, std::string(200000, 'y')), std::string(200000, 'y'));
    ::close(c);
    EXPECT_EQ(fwd.Stop(), 0);
  }
  // Another CA on the Lease: the handshake fails, the connection is closed.
  auto other = *noderuntime::server::MakeCa("other CA", 24h);
  ASSERT_TRUE(kube_.Patch(kube::LeaseResource(), "kubicle-node-lease", "kubicle-node-n1",
                          kube::PatchType::kMerge,
                          {{"metadata",
                            {{"annotations", {{"kubicle.dev/serving-ca", other.cert_pem}}}}}})
                  .ok());
  const int local = *noderuntime::server::PickFreePort();
  ForwardRun fwd([this](const auto& a) { return Run(a); },
                 {"port-forward", "a", std::to_string(local) + ":" + std::to_string(guest.port)},
                 env_);
  int c = fwd.Connect(local);
  ASSERT_GE(c, 0);
  char b;
  EXPECT_LE(::recv(c, &b, 1, 0), 0);
  ::close(c);
  EXPECT_EQ(fwd.Stop(), 0);
  EXPECT_NE(err_.str().find("TLS with the node"), std::string::npos) << err_.str();
  tls_server.Stop();
}

}  // namespace
}  // namespace kubicle::plugin
