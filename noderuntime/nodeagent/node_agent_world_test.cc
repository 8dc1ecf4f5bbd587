// TemplateSync and SandboxSync against the in-memory apiserver
// (FakeKubeClient) and node runtime (FakeSandboxService): the node
// protocol's rules without KVM or a control plane. The e2e tier runs the
// same against the real ones (e2e/node_e2e_test.cc).
#include <gtest/gtest.h>

#include "common/sha256.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include "kube/fake_kube_client.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "noderuntime/node_util.h"
#include "kube/json_fields.h"
#include "noderuntime/nodeagent/node_names.h"
#include "noderuntime/nodeagent/sandbox_sync.h"
#include "noderuntime/nodeagent/template_sync.h"
#include "noderuntime/nodeagent/workspace_sync.h"
#include "noderuntime/nodeagent/testing/http_test_server.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace fs = std::filesystem;
using kube::Json;
using kube::NumAt;
using kube::StrAt;

constexpr char kNs[] = "team";
constexpr char kToken[] = "the-token";

bool Eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

class NodeAgentWorld : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nodeagent-world-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "images");
    for (const char* f : {"kernel", "rootfs"}) std::ofstream(dir_ / "images" / f) << "image";
    config_.node_name = "n1";
    config_.endpoint = "10.0.0.7:7443";
    config_.images.roots = {(dir_ / "images").string()};
    config_.images.cache_dir = (dir_ / "cache").string();
    config_.resync = std::chrono::seconds(1);
    config_.reap_interval = std::chrono::seconds(1);
    StartAgent();
  }
  void TearDown() override {
    StopAgent();
    fs::remove_all(dir_);
  }
  void StartAgent() {
    templates_ = std::make_unique<TemplateSync>(&kube_, &svc_, config_, &registry_);
    workspaces_ = std::make_unique<WorkspaceSync>(&kube_, &svc_, config_);
    sandboxes_ = std::make_unique<SandboxSync>(&kube_, &svc_, templates_.get(), config_, &registry_);
    sandboxes_->SetWorkspaces(workspaces_.get());
    templates_->Start();
    workspaces_->Start();
    sandboxes_->Start();
  }
  void StopAgent() {
    sandboxes_.reset();
    workspaces_.reset();
    templates_.reset();
  }

  Json CreateTemplate(const std::string& name, const std::string& kernel,
                      const std::string& kernel_sha256 = "") {
    Json t = {{"metadata", {{"name", name}}},
              {"spec", {{"kernel", kernel}, {"rootfs", (dir_ / "images" / "rootfs").string()},
                        {"memoryMiB", 256}, {"vcpus", 1}}}};
    if (!kernel_sha256.empty()) t["spec"]["kernelSha256"] = kernel_sha256;
    auto r = kube_.Create(kube::SandboxTemplateResource(), kNs, t);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  Json Template(const std::string& name) { return *kube_.Get(kube::SandboxTemplateResource(), kNs, name); }
  std::string NodeMessage(const std::string& tmpl) {
    auto e = EntryOf(Template(tmpl), "n1");
    return e ? e->message : "";
  }
  // The value of one series in the node agent's /metrics exposition
  // (`series` is the name with its labels, as rendered), or -1 if absent.
  double Metric(const std::string& series) {
    const std::string text = registry_.Render();
    for (size_t at = text.find(series + " "); at != std::string::npos;
         at = text.find(series + " ", at + 1)) {
      if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + series.size() + 1));
    }
    return -1;
  }
  std::string NodePhase(const std::string& tmpl) {
    auto e = EntryOf(Template(tmpl), "n1");
    return e ? e->phase : "";
  }
  // A Sandbox as the operator leaves it once placed on n1.
  Json CreateSandbox(const std::string& name, Json spec_extra = Json::object(), bool token = true) {
    Json spec = {{"templateRef", {{"name", "tg"}}}};
    for (auto& [k, v] : spec_extra.items()) spec[k] = v;
    Json s = {{"metadata", {{"name", name}, {"labels", {{"kubicle.dev/node", "n1"}, {"kubicle.dev/run", "r1"}}},
                            {"finalizers", {"kubicle.dev/vm-teardown"}}}},
              {"spec", spec}};
    auto r = kube_.Create(kube::SandboxResource(), kNs, s);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (token) PublishToken(name);
    return r.ok() ? *r : Json();
  }
  void PublishToken(const std::string& name) {
    ASSERT_TRUE(kube_.Patch(kube::SandboxResource(), kNs, name, kube::PatchType::kMerge,
                            Json{{"status", {{"tokenSha256", Sha256Hex(kToken)}}}}, "status").ok());
  }
  std::string VmState(const std::string& name) {
    auto s = kube_.Get(kube::SandboxResource(), kNs, name);
    return s.ok() ? StrAt(*s, {"status", "vm", "state"}) : "<gone>";
  }
  std::string VmMessage(const std::string& name) {
    return StrAt(*kube_.Get(kube::SandboxResource(), kNs, name), {"status", "vm", "message"});
  }
  std::string IdOf(const Json& obj) { return SandboxNodeId(StrAt(obj, {"metadata", "uid"})); }
  void ReadyTemplate() {
    CreateTemplate("tg", (dir_ / "images" / "kernel").string());
    ASSERT_TRUE(Eventually([&] { return NodePhase("tg") == "Ready"; }));
  }

  fs::path dir_;
  AgentConfig config_;
  kube::FakeKubeClient kube_;
  server::testing::FakeSandboxService svc_;
  metrics::Registry registry_;
  std::unique_ptr<TemplateSync> templates_;
  std::unique_ptr<SandboxSync> sandboxes_;
  std::unique_ptr<WorkspaceSync> workspaces_;
};

TEST_F(NodeAgentWorld, TemplatesAreBakedAndReportedAndBadImagesFail) {
  Json t = CreateTemplate("tg", (dir_ / "images" / "kernel").string());
  ASSERT_TRUE(Eventually([&] { return NodePhase("tg") == "Ready"; }));
  auto entry = EntryOf(Template("tg"), "n1");
  EXPECT_EQ(entry->observed_generation, 1);
  EXPECT_EQ(entry->snapshot_digest.rfind("sha256:", 0), 0u);
  const std::string node_tmpl = TemplateNodeId(StrAt(t, {"metadata", "uid"}), 1);
  auto baked = svc_.GetTemplate(node_tmpl);
  ASSERT_TRUE(baked.ok());
  EXPECT_EQ(baked->spec.kernel, fs::canonical(dir_ / "images" / "kernel").string());
  EXPECT_EQ(baked->spec.mem_mib, 256u);

  for (const char* bad : {"/etc/passwd", "/dev/vda", "/x/../etc/shadow"}) {
    const std::string name = std::string("bad") + std::to_string(std::hash<std::string>{}(bad) % 1000);
    CreateTemplate(name, bad);
    ASSERT_TRUE(Eventually([&] { return NodePhase(name) == "Failed"; })) << bad;
    const std::string msg = EntryOf(Template(name), "n1")->message;
    EXPECT_NE(msg.find("kernel"), std::string::npos) << msg;
  }
  // The bad ones never reached the runtime.
  EXPECT_EQ(svc_.ListTemplates().size(), 1u);
}

// An http(s) image is downloaded once per node, checked against its sha256,
// and the download's progress shows in the template's status.nodes[] entry.
TEST_F(NodeAgentWorld, AnHttpImageShowsDownloadProgressAndIsFetchedOncePerNode) {
  const std::string kernel(2 << 20, 'k');
  TestHttpServer server([&](const std::string&) {
    // 2 MiB in 64 KiB pieces 60 ms apart: ~2 s, so a progress line shows.
    return TestHttpReply{.body = kernel, .piece_bytes = 64 << 10, .pace = std::chrono::milliseconds(60)};
  });
  CreateTemplate("remote", server.Url("/vmlinux"), Sha256Hex(kernel));
  ASSERT_TRUE(Eventually([&] { return NodeMessage("remote").rfind("downloading kernel: ", 0) == 0; }))
      << NodeMessage("remote");
  EXPECT_EQ(NodePhase("remote"), "Baking");
  EXPECT_EQ(Metric("kubicle_node_agent_bake_queue"), 1);  // a download counts
  EXPECT_NE(NodeMessage("remote").find(" of 2 MiB ("), std::string::npos) << NodeMessage("remote");
  ASSERT_TRUE(Eventually([&] { return NodePhase("remote") == "Ready"; }));
  EXPECT_EQ(server.requests(), 1);

  // A second template of the same image uses the node's copy.
  CreateTemplate("remote-2", server.Url("/vmlinux"), Sha256Hex(kernel));
  ASSERT_TRUE(Eventually([&] { return NodePhase("remote-2") == "Ready"; }));
  EXPECT_EQ(server.requests(), 1);

  // One whose bytes do not match the sha256 fails and says so.
  CreateTemplate("tampered", server.Url("/other"), Sha256Hex("something else"));
  ASSERT_TRUE(Eventually([&] { return NodePhase("tampered") == "Failed"; }));
  EXPECT_NE(NodeMessage("tampered").find("sha256"), std::string::npos) << NodeMessage("tampered");
}

// The node agent's own figures: how late it sees Sandboxes, how long its
// status writes take, and how many templates are baking.
TEST_F(NodeAgentWorld, MetricsCountWatchLagStatusWritesAndTheBakeQueue) {
  EXPECT_EQ(Metric("kubicle_node_agent_bake_queue"), 0);
  ReadyTemplate();
  EXPECT_GE(Metric("kubicle_node_agent_status_write_seconds_count{kind=\"SandboxTemplate\"}"), 1);
  for (const char* name : {"agent-1", "agent-2"}) CreateSandbox(name);
  ASSERT_TRUE(Eventually([&] { return VmState("agent-1") == "Running" && VmState("agent-2") == "Running"; }));
  EXPECT_EQ(Metric("kubicle_node_agent_watch_lag_seconds_count"), 2);
  // Each Sandbox's Restoring and Running reports at least.
  EXPECT_GE(Metric("kubicle_node_agent_sandbox_status_write_seconds_count"), 2);
  // Observed just after the Running report: it may trail it a little.
  EXPECT_TRUE(Eventually([&] { return Metric("kubicle_node_agent_start_seconds_count{how=\"restore\"}") == 2; }))
      << Metric("kubicle_node_agent_start_seconds_count{how=\"restore\"}");
  EXPECT_EQ(Metric("kubicle_node_agent_bake_queue"), 0);
}

TEST_F(NodeAgentWorld, ASpecChangeIsBakedAgainAndTheOldGenerationGoes) {
  Json t = CreateTemplate("tg", (dir_ / "images" / "kernel").string());
  ASSERT_TRUE(Eventually([&] { return NodePhase("tg") == "Ready"; }));
  ASSERT_TRUE(kube_.Patch(kube::SandboxTemplateResource(), kNs, "tg", kube::PatchType::kMerge,
                          Json{{"spec", {{"memoryMiB", 512}}}}).ok());
  const std::string uid = StrAt(t, {"metadata", "uid"});
  ASSERT_TRUE(Eventually([&] {
    auto e = EntryOf(Template("tg"), "n1");
    return e && e->phase == "Ready" && e->observed_generation == 2;
  }));
  EXPECT_TRUE(Eventually([&] { return !svc_.GetTemplate(TemplateNodeId(uid, 1)).ok(); }));
  EXPECT_EQ(svc_.GetTemplate(TemplateNodeId(uid, 2))->spec.mem_mib, 512u);
  // Deleting the SandboxTemplate removes what the node baked for it.
  ASSERT_TRUE(kube_.Delete(kube::SandboxTemplateResource(), kNs, "tg").ok());
  EXPECT_TRUE(Eventually([&] { return svc_.ListTemplates().empty(); }));
}

TEST_F(NodeAgentWorld, SandboxRunsWithTheOperatorsTokenAndEnvThenTearsDown) {
  ReadyTemplate();
  Json s = CreateSandbox("agent-1", Json{{"env", Json::array({{{"name", "GREETING"}, {"value", "hi"}}})}});
  ASSERT_TRUE(Eventually([&] { return VmState("agent-1") == "Running"; }));
  Json got = *kube_.Get(kube::SandboxResource(), kNs, "agent-1");
  EXPECT_EQ(StrAt(got, {"status", "vm", "endpoint"}), "10.0.0.7:7443");
  EXPECT_GT(NumAt(got, {"status", "vm", "restoreMillis"}), 0);
  const std::string id = IdOf(s);
  auto vm = svc_.GetSandbox(id);
  ASSERT_TRUE(vm.ok());
  EXPECT_EQ(vm->env, (Env{{"GREETING", "hi"}}));
  EXPECT_EQ(vm->labels.at("kubicle.dev/run"), "r1");
  EXPECT_TRUE(svc_.CheckToken(id, kToken));
  EXPECT_FALSE(svc_.CheckToken(id, "another"));

  // The finalizer holds the object: the node tears down, then says so.
  ASSERT_TRUE(kube_.Delete(kube::SandboxResource(), kNs, "agent-1").ok());
  ASSERT_TRUE(Eventually([&] { return VmState("agent-1") == "Terminated"; }));
  EXPECT_FALSE(svc_.GetSandbox(id).ok());
}

// spec.suspend (docs/node.md, "Suspend and resume"): true suspends the VM
// and reports Suspended without an endpoint; false resumes it, the same VM;
// a Sandbox made with it set runs first, then suspends; a restart while
// suspended keeps it so; delete of a suspended one tears it down.
TEST_F(NodeAgentWorld, SpecSuspendSuspendsAndResumesTheSameVm) {
  ReadyTemplate();
  Json s = CreateSandbox("sus");
  ASSERT_TRUE(Eventually([&] { return VmState("sus") == "Running"; }));
  const std::string id = IdOf(s);
  ASSERT_TRUE(svc_.WriteFile(id, "/kept", guest::protocol::Bytes{'x'}, 0644).ok());
  auto set_suspend = [&](bool v) {
    ASSERT_TRUE(kube_.Patch(kube::SandboxResource(), kNs, "sus", kube::PatchType::kMerge,
                            Json{{"spec", {{"suspend", v}}}}).ok());
  };
  set_suspend(true);
  ASSERT_TRUE(Eventually([&] { return VmState("sus") == "Suspended"; }));
  EXPECT_EQ(svc_.GetSandbox(id)->state, SandboxState::kSuspended);
  Json got = *kube_.Get(kube::SandboxResource(), kNs, "sus");
  EXPECT_TRUE(StrAt(got, {"status", "vm", "endpoint"}).empty());
  StopAgent();
  StartAgent();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(VmState("sus"), "Suspended");
  EXPECT_EQ(svc_.GetSandbox(id)->state, SandboxState::kSuspended);
  set_suspend(false);
  ASSERT_TRUE(Eventually([&] { return VmState("sus") == "Running"; }));
  EXPECT_EQ(StrAt(*kube_.Get(kube::SandboxResource(), kNs, "sus"), {"status", "vm", "endpoint"}),
            "10.0.0.7:7443");
  auto f = svc_.ReadFile(id, "/kept");
  ASSERT_TRUE(f.ok()) << f.status().ToString();  // the same VM, not a new one

  Json later = CreateSandbox("born-suspended", Json{{"suspend", true}});
  ASSERT_TRUE(Eventually([&] { return VmState("born-suspended") == "Suspended"; }));
  ASSERT_TRUE(kube_.Delete(kube::SandboxResource(), kNs, "born-suspended").ok());
  ASSERT_TRUE(Eventually([&] { return VmState("born-suspended") == "Terminated"; }));
  EXPECT_FALSE(svc_.GetSandbox(IdOf(later)).ok());
}

TEST_F(NodeAgentWorld, AReadyEntrySaysWhereToRunAndTheRunTokenReachesTheNode) {
  ReadyTemplate();
  auto e = EntryOf(Template("tg"), "n1");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->endpoint, "10.0.0.7:7443");
  ASSERT_FALSE(e->node_template.empty());
  EXPECT_TRUE(svc_.GetTemplate(e->node_template).ok());
  EXPECT_FALSE(svc_.CheckRunToken(e->node_template, "tok-1")) << "none published yet";
  // The operator publishes the hash; the node takes it, then a new one.
  auto publish = [&](const std::string& token) {
    ASSERT_TRUE(kube_.Patch(kube::SandboxTemplateResource(), kNs, "tg", kube::PatchType::kMerge,
                            Json{{"status", {{"runTokenSha256", Sha256Hex(token)}}}}, "status").ok());
  };
  publish("tok-1");
  ASSERT_TRUE(Eventually([&] { return svc_.CheckRunToken(e->node_template, "tok-1"); }));
  publish("tok-2");
  ASSERT_TRUE(Eventually([&] { return svc_.CheckRunToken(e->node_template, "tok-2"); }));
  EXPECT_FALSE(svc_.CheckRunToken(e->node_template, "tok-1")) << "the old token is revoked";
}

// The node restores as soon as the Sandbox is placed here, in parallel
// with the operator publishing its token (issue 29), but nothing opens the
// VM and it is not reported Running (so never Ready) before the hash is
// known; then the same VM opens to that token only.
TEST_F(NodeAgentWorld, TheVmRestoresBeforeTheTokenButOpensOnlyWithIt) {
  ReadyTemplate();
  Json s = CreateSandbox("agent-1", Json::object(), /*token=*/false);
  const std::string id = IdOf(s);
  ASSERT_TRUE(Eventually([&] {
    auto vm = svc_.GetSandbox(id);
    return vm.ok() && vm->state == SandboxState::kRunning;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // room for a wrong report
  EXPECT_EQ(VmState("agent-1"), "") << "reported before the token was known";
  EXPECT_FALSE(svc_.CheckToken(id, kToken));
  EXPECT_FALSE(svc_.CheckToken(id, ""));
  PublishToken("agent-1");
  ASSERT_TRUE(Eventually([&] { return VmState("agent-1") == "Running"; }));
  EXPECT_TRUE(svc_.CheckToken(id, kToken));
  EXPECT_FALSE(svc_.CheckToken(id, "another"));
  EXPECT_EQ(svc_.sandbox_count(), 1u) << "the same VM, not a second restore";
}

// A fork waits for its token (siblings are forked in one call, each with
// its own); a hash the node refuses fails the Sandbox saying why.
TEST_F(NodeAgentWorld, AForkWaitsForItsTokenAndABadHashFailsTheSandbox) {
  ReadyTemplate();
  Json src = CreateSandbox("src");
  ASSERT_TRUE(Eventually([&] { return VmState("src") == "Running"; }));
  CreateSandbox("kid", Json{{"forkSource", "src"}}, /*token=*/false);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(svc_.sandbox_count(), 1u) << "forked before its token";
  Json bad = CreateSandbox("bad", Json::object(), /*token=*/false);
  ASSERT_TRUE(Eventually([&] { return svc_.GetSandbox(IdOf(bad)).ok(); }));
  ASSERT_TRUE(kube_.Patch(kube::SandboxResource(), kNs, "bad", kube::PatchType::kMerge,
                          Json{{"status", {{"tokenSha256", "NOT-HEX"}}}}, "status").ok());
  ASSERT_TRUE(Eventually([&] { return VmState("bad") == "Failed"; }));
  EXPECT_NE(VmMessage("bad").find("64 lowercase hex"), std::string::npos) << VmMessage("bad");
  PublishToken("kid");
  ASSERT_TRUE(Eventually([&] { return VmState("kid") == "Running"; }));
}

// A client's own token (spec.tokenSha256, immutable; the operator
// publishes it as written): the node takes it from the spec, so the VM
// opens and is reported Running without the operator's status write, and
// a fork's children are forked at once, each with its own. A spec hash
// that is not 64 lowercase hex is never taken.
TEST_F(NodeAgentWorld, AClientsOwnTokenHashOpensTheVmWithoutTheOperatorsWrite) {
  ReadyTemplate();
  Json mine = CreateSandbox("mine", Json{{"tokenSha256", Sha256Hex("mine")}}, /*token=*/false);
  ASSERT_TRUE(Eventually([&] { return VmState("mine") == "Running"; }));
  EXPECT_TRUE(svc_.CheckToken(IdOf(mine), "mine"));
  EXPECT_FALSE(svc_.CheckToken(IdOf(mine), kToken));
  std::vector<Json> kids;
  for (int i = 0; i < 3; ++i) {
    const std::string n = "kid-" + std::to_string(i);
    kids.push_back(CreateSandbox(n, Json{{"forkSource", "mine"}, {"tokenSha256", Sha256Hex(n)}},
                                 /*token=*/false));
  }
  for (int i = 0; i < 3; ++i) {
    const std::string n = "kid-" + std::to_string(i);
    ASSERT_TRUE(Eventually([&] { return VmState(n) == "Running"; })) << n;
    EXPECT_TRUE(svc_.CheckToken(IdOf(kids[i]), n));
    EXPECT_FALSE(svc_.CheckToken(IdOf(kids[i]), "mine"));
  }
  Json bad = CreateSandbox("bad", Json{{"tokenSha256", std::string(64, 'A')}}, /*token=*/false);
  ASSERT_TRUE(Eventually([&] { return svc_.GetSandbox(IdOf(bad)).ok(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // room for a wrong report
  EXPECT_EQ(VmState("bad"), "") << "opened with a malformed hash";
  EXPECT_FALSE(svc_.CheckToken(IdOf(bad), ""));
}

TEST_F(NodeAgentWorld, ARestartReadoptsByUidFailsVanishedVmsAndReapsOrphans) {
  ReadyTemplate();
  Json keep = CreateSandbox("keep");
  Json lost = CreateSandbox("lost");
  ASSERT_TRUE(Eventually([&] { return VmState("keep") == "Running" && VmState("lost") == "Running"; }));
  StopAgent();
  // While the agent is down: one VM vanishes, one Sandbox is deleted for good
  // (its finalizer removed, as the operator does for a gone node), and a VM
  // no object ever had appears.
  ASSERT_TRUE(svc_.DeleteSandbox(IdOf(lost)).ok());
  Json gone = CreateSandbox("gone");
  SandboxSpec stray;
  stray.id = "k-00000000-0000-0000-0000-000000000000";
  stray.template_name = svc_.ListTemplates()[0].spec.name;
  stray.labels = {{kLabelSandboxUid, "00000000-0000-0000-0000-000000000000"}};
  ASSERT_TRUE(svc_.CreateSandbox(stray).ok());
  const uint32_t keep_cid = svc_.GetSandbox(IdOf(keep))->cid;
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return VmState("gone") == "Running"; }));
  ASSERT_TRUE(kube_.Patch(kube::SandboxResource(), kNs, "gone", kube::PatchType::kMerge,
                          Json{{"metadata", {{"finalizers", nullptr}}}}).ok());
  ASSERT_TRUE(kube_.Delete(kube::SandboxResource(), kNs, "gone").ok());

  EXPECT_TRUE(Eventually([&] { return VmState("lost") == "Failed"; }));
  EXPECT_NE(VmMessage("lost").find("VM is gone"), std::string::npos) << VmMessage("lost");
  EXPECT_EQ(VmState("keep"), "Running");
  ASSERT_TRUE(svc_.GetSandbox(IdOf(keep)).ok());
  EXPECT_EQ(svc_.GetSandbox(IdOf(keep))->cid, keep_cid);  // re-adopted, not made again
  EXPECT_TRUE(Eventually([&] { return !svc_.GetSandbox(stray.id).ok(); }));
  EXPECT_TRUE(Eventually([&] { return !svc_.GetSandbox(IdOf(gone)).ok(); }));
}

TEST_F(NodeAgentWorld, ForkChildrenAreForkedFromTheRunningSource) {
  ReadyTemplate();
  Json src = CreateSandbox("src");
  std::vector<Json> kids;
  for (int i = 0; i < 3; ++i) kids.push_back(CreateSandbox("f-" + std::to_string(i), Json{{"forkSource", "src"}}));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Eventually([&] { return VmState("f-" + std::to_string(i)) == "Running"; })) << i;
    auto vm = svc_.GetSandbox(IdOf(kids[i]));
    ASSERT_TRUE(vm.ok());
    EXPECT_EQ(vm->fork_of, IdOf(src));
    EXPECT_EQ(vm->labels.at(kLabelSandboxUid), StrAt(kids[i], {"metadata", "uid"}));
    EXPECT_TRUE(svc_.CheckToken(vm->id, kToken));
  }
  // A fork of a source that is not on this node fails with the reason.
  CreateSandbox("orphan", Json{{"forkSource", "elsewhere"}});
  ASSERT_TRUE(Eventually([&] { return VmState("orphan") == "Failed"; }));
  EXPECT_NE(VmMessage("orphan").find("not a Sandbox on node n1"), std::string::npos);
}

TEST_F(NodeAgentWorld, ResourcesPickAVariantAndCannotShrinkMemory) {
  ReadyTemplate();
  Json big = CreateSandbox("big", Json{{"resources", {{"memoryMiB", 1024}, {"vcpus", 2}}}});
  ASSERT_TRUE(Eventually([&] { return VmState("big") == "Running"; }));
  auto vm = svc_.GetSandbox(IdOf(big));
  ASSERT_TRUE(vm.ok());
  EXPECT_EQ(vm->mem_mib, 1024u);
  EXPECT_EQ(vm->vcpus, 2u);
  CreateSandbox("small", Json{{"resources", {{"memoryMiB", 128}}}});
  ASSERT_TRUE(Eventually([&] { return VmState("small") == "Failed"; }));
  EXPECT_NE(VmMessage("small").find("cannot shrink"), std::string::npos) << VmMessage("small");

  // A field left unset is the template's (256 MiB, 1 vCPU).
  Json cpus = CreateSandbox("cpus", Json{{"resources", {{"vcpus", 2}}}});
  Json mem = CreateSandbox("mem", Json{{"resources", {{"memoryMiB", 512}}}});
  ASSERT_TRUE(Eventually([&] { return VmState("cpus") == "Running" && VmState("mem") == "Running"; }))
      << VmMessage("cpus") << " / " << VmMessage("mem");
  EXPECT_EQ(svc_.GetSandbox(IdOf(cpus))->mem_mib, 256u);
  EXPECT_EQ(svc_.GetSandbox(IdOf(cpus))->vcpus, 2u);
  EXPECT_EQ(svc_.GetSandbox(IdOf(mem))->mem_mib, 512u);
  EXPECT_EQ(svc_.GetSandbox(IdOf(mem))->vcpus, 1u);
}

TEST_F(NodeAgentWorld, AStartThatTimesOutIsRetriedThenFailed) {
  ReadyTemplate();
  svc_.SetCreateError(Status::DeadlineExceeded("the agent did not answer in time"));
  CreateSandbox("slow");
  ASSERT_TRUE(Eventually([&] { return VmState("slow") == "Failed"; }));
  EXPECT_NE(VmMessage("slow").find("did not answer"), std::string::npos);
  // One timeout, then the host catches up: the Sandbox runs.
  svc_.SetCreateError(Status::DeadlineExceeded("slow host"), 1);
  CreateSandbox("once");
  ASSERT_TRUE(Eventually([&] { return VmState("once") == "Running"; }));
}

TEST_F(NodeAgentWorld, StatusWritesRetryThroughAnApiserverOutage) {
  ReadyTemplate();
  StopAgent();
  CreateSandbox("agent-1");
  kube_.FailNext("patch", Status::Unavailable("apiserver restarting"), 5);
  StartAgent();
  ASSERT_TRUE(Eventually([&] { return VmState("agent-1") == "Running"; }));
  EXPECT_EQ(svc_.sandbox_count(), 1u);
}

}  // namespace
}  // namespace kubicle::noderuntime::nodeagent

namespace kubicle::noderuntime::nodeagent {
namespace {

// ---- Workspaces (WorkspaceSync, and spec.workspaceRef in SandboxSync) ----

class WorkspaceWorld : public NodeAgentWorld {
 protected:
  // A Workspace as the operator leaves it once placed on n1.
  Json CreateWorkspace(const std::string& name, bool token = true) {
    Json w = {{"metadata", {{"name", name}, {"labels", {{"kubicle.dev/node", "n1"}}},
                            {"finalizers", {"kubicle.dev/workspace-teardown"}}}},
              {"spec", {{"sizeMiB", 64}}}};
    auto r = kube_.Create(kube::WorkspaceResource(), kNs, w);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (token) {
      EXPECT_TRUE(kube_.Patch(kube::WorkspaceResource(), kNs, name, kube::PatchType::kMerge,
                              Json{{"status", {{"tokenSha256", Sha256Hex(kToken)}}}}, "status").ok());
    }
    return r.ok() ? *r : Json();
  }
  Json Disk(const std::string& name) {
    auto w = kube_.Get(kube::WorkspaceResource(), kNs, name);
    return w.ok() ? kube::At(*w, {"status", "disk"}) : Json("<gone>");
  }
};

TEST_F(WorkspaceWorld, AWorkspaceIsMadeWithThePublishedTokenReportedAndDeleted) {
  Json w = CreateWorkspace("data", /*token=*/false);
  const std::string id = "w-" + StrAt(w, {"metadata", "uid"});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(svc_.GetWorkspace(id).ok()) << "made before the operator published the token hash";
  ASSERT_TRUE(kube_.Patch(kube::WorkspaceResource(), kNs, "data", kube::PatchType::kMerge,
                          Json{{"status", {{"tokenSha256", Sha256Hex(kToken)}}}}, "status").ok());
  ASSERT_TRUE(Eventually([&] { return StrAt(Disk("data"), {"state"}) == "Ready"; }));
  Json disk = Disk("data");
  EXPECT_EQ(StrAt(disk, {"id"}), id);
  EXPECT_EQ(StrAt(disk, {"endpoint"}), "10.0.0.7:7443");
  auto info = svc_.GetWorkspace(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size_mib, 64u);
  EXPECT_TRUE(svc_.CheckWorkspaceToken(id, kToken));
  EXPECT_FALSE(svc_.CheckWorkspaceToken(id, "another"));

  ASSERT_TRUE(kube_.Delete(kube::WorkspaceResource(), kNs, "data").ok());
  ASSERT_TRUE(Eventually([&] { return StrAt(Disk("data"), {"state"}) == "Deleted"; }));
  EXPECT_EQ(svc_.GetWorkspace(id).status().code(), StatusCode::kNotFound);
}

TEST_F(WorkspaceWorld, ASandboxAttachesItsWorkspaceAndDeletionWaitsForIt) {
  ReadyTemplate();
  Json w = CreateWorkspace("data");
  const std::string wid = "w-" + StrAt(w, {"metadata", "uid"});
  Json s = CreateSandbox("s1", Json{{"workspaceRef", {{"name", "data"}}}});
  ASSERT_TRUE(Eventually([&] { return VmState("s1") == "Running"; })) << VmMessage("s1");
  auto vm = svc_.GetSandbox(IdOf(s));
  ASSERT_TRUE(vm.ok());
  EXPECT_EQ(vm->workspace, wid);
  ASSERT_TRUE(Eventually([&] { return StrAt(Disk("data"), {"attachedTo"}) == IdOf(s); }));

  // Deleting the Workspace while s1 runs: the disk stays, the reason is reported.
  ASSERT_TRUE(kube_.Delete(kube::WorkspaceResource(), kNs, "data").ok());
  ASSERT_TRUE(Eventually([&] { return !StrAt(Disk("data"), {"message"}).empty(); }));
  EXPECT_NE(StrAt(Disk("data"), {"state"}), "Deleted");
  EXPECT_TRUE(svc_.GetWorkspace(wid).ok());
  ASSERT_TRUE(kube_.Delete(kube::SandboxResource(), kNs, "s1").ok());
  ASSERT_TRUE(Eventually([&] { return VmState("s1") == "Terminated"; }));
  ASSERT_TRUE(Eventually([&] { return StrAt(Disk("data"), {"state"}) == "Deleted"; }));
  EXPECT_EQ(svc_.GetWorkspace(wid).status().code(), StatusCode::kNotFound);
}

TEST_F(WorkspaceWorld, TheNodesRefusalOfASecondWriterIsWaitingNotFailed) {
  ReadyTemplate();
  CreateWorkspace("data");
  Json s1 = CreateSandbox("s1", Json{{"workspaceRef", {{"name", "data"}}}});
  ASSERT_TRUE(Eventually([&] { return VmState("s1") == "Running"; })) << VmMessage("s1");
  // The operator would not place s2; a stale one did: the node refuses.
  CreateSandbox("s2", Json{{"workspaceRef", {{"name", "data"}}}});
  ASSERT_TRUE(Eventually([&] { return VmState("s2") == "Waiting"; })) << VmState("s2");
  EXPECT_FALSE(VmMessage("s2").empty());
  ASSERT_TRUE(kube_.Delete(kube::SandboxResource(), kNs, "s1").ok());
  ASSERT_TRUE(Eventually([&] { return VmState("s2") == "Running"; })) << VmMessage("s2");
}

}  // namespace
}  // namespace kubicle::noderuntime::nodeagent
