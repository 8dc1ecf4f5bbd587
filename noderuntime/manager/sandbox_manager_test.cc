// Unit tests of SandboxManager over FakeVmmLauncher (no /dev/kvm, no VMM
// processes): template bake, create, fork, re-adoption after a daemon
// restart, TTL expiry, VMM crashes and orphans. The same runtime code runs as
// in production down to the control and agent sockets; only the VMM
// processes are simulated (noderuntime/testing/fake_vmm_launcher.h). The kvm
// tests (sandbox_manager_kvm_test.cc) cover the real VMM.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/sha256.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/testing/eventually.h"
#include "noderuntime/testing/fake_vmm_launcher.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using guest::protocol::Bytes;
using testing::Eventually;
using testing::SandboxesHoldMib;
using testing::FakeVmmLauncher;
namespace fs = std::filesystem;

Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string S(const Bytes& b) { return std::string(b.begin(), b.end()); }

class SandboxManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kf-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    state_dir_ = tmpl;
    kernel_ = state_dir_ + "-kernel";
    std::ofstream(kernel_) << "not a kernel: the fake boots anything";
  }
  void TearDown() override {
    if (m_) m_->Shutdown(true);
    m_.reset();
    launcher_.reset();  // stops whatever VMs a failed test left
    fs::remove_all(state_dir_);
    fs::remove(kernel_);
  }

  NodeConfig Config() {
    NodeConfig c;
    c.state_dir = state_dir_;
    c.vmm_binary = "kubicle-vmm";  // never run: the launcher is the fake
    c.launcher = launcher_;
    c.capacity_mem_mib = 1024;
    c.capacity_vcpus = 16;
    c.pool_size_per_shape = 1;
    c.use_cgroups = false;
    c.network.enabled = false;  // unit tests leave the host's network alone (sandbox_manager_network_test fakes it)
    c.clock = [this] { return std::chrono::system_clock::now() + std::chrono::seconds(clock_offset_s_.load()); };
    c.sweep_interval = 3600s;  // tests sweep by hand
    c.orphan_sweep_interval = 0s;
    c.agent_timeout = 5s;
    c.delete_grace = 1s;
    c.vmm_seccomp = vmm_seccomp_;
    return c;
  }
  // Every VMM the manager started (bake, pool), with the --seccomp each got.
  std::vector<std::string> SpawnedSeccompModes() const {
    std::vector<std::string> modes;
    for (const auto& vm : launcher_->Vms())
      if (vm.mode != "fork") modes.push_back(vm.mode + ":" + vm.seccomp);
    return modes;
  }
  vmm::SeccompMode vmm_seccomp_ = vmm::SeccompMode::kEnforce;

  void Open() {
    auto m = SandboxManager::Open(Config(), nullptr);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    m_ = std::move(m).value();
  }

  void OpenAndBake() {
    ASSERT_NO_FATAL_FAILURE(Open());
    TemplateSpec spec;
    spec.name = "tg";
    spec.kernel = kernel_;
    spec.mem_mib = 64;
    spec.vcpus = 1;
    spec.warmup = {"true"};
    ASSERT_TRUE(m_->PutTemplate(spec).ok());
    Result<TemplateInfo> t = Status::Unavailable("not yet");
    ASSERT_TRUE(Eventually([&] {
      t = m_->GetTemplate("tg");
      return t.ok() && t->state != TemplateState::kBaking;
    }));
    ASSERT_EQ(t->state, TemplateState::kReady) << t->message;
  }

  Result<SandboxInfo> Create(const std::string& id, Labels labels = {},
                             std::optional<int64_t> ttl = std::nullopt) {
    SandboxSpec s;
    s.id = id;
    s.template_name = "tg";
    s.labels = std::move(labels);
    s.ttl_seconds = ttl;
    return m_->CreateSandbox(s);
  }

  std::string Run(const std::string& id, std::vector<std::string> argv) {
    ExecOptions o;
    o.request.argv = std::move(argv);
    auto r = m_->Exec(id, o);
    if (!r.ok()) return "error: " + r.status().ToString();
    return S(r->stdout_data);
  }

  bool VmRunning(pid_t pid) {
    auto vm = launcher_->Vm(pid);
    return vm && !vm->exit_code;
  }

  std::string state_dir_, kernel_;
  std::shared_ptr<FakeVmmLauncher> launcher_ = std::make_shared<FakeVmmLauncher>();
  std::atomic<int64_t> clock_offset_s_{0};
  std::unique_ptr<SandboxManager> m_;
};

TEST_F(SandboxManagerTest, BakeBootsSnapshotsAndStopsItsVm) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto t = m_->GetTemplate("tg");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->digest.rfind("sha256:", 0), 0u);
  EXPECT_TRUE(fs::exists(t->snapshot_dir + "/state"));
  EXPECT_FALSE(fs::exists(state_dir_ + "/templates/tg/bake"));
  bool bake_vm_gone = false;
  for (const auto& vm : launcher_->Vms())
    if (vm.mode == "run") bake_vm_gone = vm.exit_code == 0;  // shut down, not killed
  EXPECT_TRUE(bake_vm_gone);
}

// --vmm-seccomp reaches every VMM the node starts: the bake's and the
// pool's (a restore or a fork child keeps its process's filter).
TEST_F(SandboxManagerTest, EveryVmmGetsTheNodesSeccompMode) {
  vmm_seccomp_ = vmm::SeccompMode::kLog;
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  ASSERT_TRUE(Create("a").ok());
  const std::vector<std::string> modes = SpawnedSeccompModes();
  EXPECT_NE(std::find(modes.begin(), modes.end(), "run:log"), modes.end());
  EXPECT_NE(std::find(modes.begin(), modes.end(), "pool:log"), modes.end());
  for (const std::string& m : modes) EXPECT_EQ(m.substr(m.find(':')), ":log") << m;
}

TEST_F(SandboxManagerTest, CreateRestoresAPoolVmAndServesExecAndFiles) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto a = Create("a", {{"kubicle.dev/run", "r1"}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->state, SandboxState::kRunning);
  EXPECT_EQ(a->token.size(), 64u);
  EXPECT_TRUE(m_->CheckToken("a", a->token));
  EXPECT_FALSE(m_->CheckToken("a", "wrong"));
  auto vm = launcher_->Vm(a->vmm_pid);
  ASSERT_TRUE(vm);
  EXPECT_EQ(vm->mode, "pool");
  EXPECT_EQ(vm->state, "running");
  EXPECT_EQ(vm->cid, a->cid);
  EXPECT_EQ(vm->id, "a");
  // The pool VM's socket and log, renamed to the sandbox's.
  EXPECT_NE(vm->control_path, state_dir_ + "/sock/" + std::to_string(a->cid) + ".ctl");
  EXPECT_TRUE(fs::exists(state_dir_ + "/sock/" + std::to_string(a->cid) + ".ctl"));
  EXPECT_TRUE(fs::exists(state_dir_ + "/sandboxes/a/vmm.log"));

  EXPECT_EQ(Run("a", {"hostname"}), "a\n");  // POST_RESTORE set it
  ASSERT_TRUE(m_->WriteFile("a", "/f", B("data"), 0644).ok());
  auto f = m_->ReadFile("a", "/f");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(S(*f), "data");
  EXPECT_TRUE(fs::exists(state_dir_ + "/sandboxes/a/record.json"));

  EXPECT_EQ(Create("a").status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(m_->DeleteSandbox("a").ok());
  EXPECT_FALSE(VmRunning(a->vmm_pid));
  EXPECT_EQ(m_->GetSandbox("a").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/a"));
  EXPECT_TRUE(SandboxesHoldMib(*m_, 0)) << m_->usage().mem_mib;
  for (const std::string& m : SpawnedSeccompModes()) EXPECT_EQ(m.substr(m.find(':')), ":enforce") << m;
}

// token_later (the node agent restores before the operator's token is
// published): no token opens the sandbox until SetSandboxToken gives the
// hash, which then never changes and survives a daemon restart.
TEST_F(SandboxManagerTest, ASandboxMadeBeforeItsTokenOpensOnlyOnceTheHashIsSet) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  SandboxSpec s;
  s.id = "a";
  s.template_name = "tg";
  s.token_later = true;
  auto a = m_->CreateSandbox(s);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->state, SandboxState::kRunning);
  EXPECT_TRUE(a->token.empty()) << "nothing minted";
  EXPECT_FALSE(m_->CheckToken("a", ""));
  EXPECT_FALSE(m_->CheckToken("a", "anything"));
  EXPECT_EQ(m_->SetSandboxToken("a", "ABC").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m_->SetSandboxToken("a", std::string(64, 'A')).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m_->SetSandboxToken("nope", Sha256Hex("t")).code(), StatusCode::kNotFound);
  ASSERT_TRUE(m_->SetSandboxToken("a", Sha256Hex("t")).ok());
  EXPECT_TRUE(m_->CheckToken("a", "t"));
  EXPECT_TRUE(m_->SetSandboxToken("a", Sha256Hex("t")).ok()) << "the same hash again is a no-op";
  EXPECT_EQ(m_->SetSandboxToken("a", Sha256Hex("u")).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(m_->CheckToken("a", "u"));
  m_->Shutdown(false);
  m_.reset();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_TRUE(m_->CheckToken("a", "t")) << "the hash is in the record";
}

TEST_F(SandboxManagerTest, ForkMakesRunningChildrenWithTheirOwnIdentity) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto src = Create("src", {{"kubicle.dev/run", "r1"}});
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ForkRequest req;
  req.source_id = "src";
  req.count = 3;
  req.labels = {{"tier", "kid"}};
  auto kids = m_->ForkSandbox(req);
  ASSERT_TRUE(kids.ok()) << kids.status().ToString();
  ASSERT_EQ(kids->size(), 3u);
  std::set<uint32_t> cids = {src->cid};
  for (const SandboxInfo& k : *kids) {
    EXPECT_EQ(k.state, SandboxState::kRunning);
    EXPECT_EQ(k.fork_of, "src");
    EXPECT_EQ(k.labels.at("kubicle.dev/fork-of"), "src");
    EXPECT_EQ(k.labels.at("kubicle.dev/run"), "r1");
    EXPECT_EQ(k.labels.at("tier"), "kid");
    EXPECT_TRUE(m_->CheckToken(k.id, k.token));
    EXPECT_TRUE(cids.insert(k.cid).second) << "CID reused";
    EXPECT_EQ(Run(k.id, {"hostname"}), k.id + "\n");
    auto vm = launcher_->Vm(k.vmm_pid);
    ASSERT_TRUE(vm);
    EXPECT_EQ(vm->mode, "fork");
    EXPECT_EQ(vm->cid, k.cid);
  }
  auto listed = m_->ListSandboxes("kubicle.dev/fork-of=src");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 3u);
  // Children outlive their source; a sweep by run label takes them all.
  ASSERT_TRUE(m_->DeleteSandbox("src").ok());
  EXPECT_EQ(Run((*kids)[0].id, {"echo", "still"}), "still\n");
  auto swept = m_->DeleteSandboxes("kubicle.dev/run=r1");
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->size(), 3u);
  for (const SandboxInfo& k : *kids) EXPECT_FALSE(VmRunning(k.vmm_pid));
}

TEST_F(SandboxManagerTest, FailedForkLeavesNoChildBehind) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  ASSERT_TRUE(Create("src").ok());
  launcher_->InjectFault("fork", FakeVmmLauncher::Fault::kError);
  ForkRequest req;
  req.source_id = "src";
  req.count = 2;
  auto kids = m_->ForkSandbox(req);
  EXPECT_FALSE(kids.ok());
  EXPECT_NE(kids.status().message().find("injected fault"), std::string::npos) << kids.status().ToString();
  auto all = m_->ListSandboxes("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
  EXPECT_TRUE(SandboxesHoldMib(*m_, 64)) << m_->usage().mem_mib;
  EXPECT_EQ(Run("src", {"echo", "ok"}), "ok\n");
}

TEST_F(SandboxManagerTest, RestartReadoptsRunningSandboxesAndFailsLostOnes) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto a = Create("a");
  auto b = Create("b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(m_->WriteFile("a", "/kept", B("across restarts"), 0644).ok());
  m_->Shutdown(false);  // the daemon goes; its VMs stay
  m_.reset();
  EXPECT_TRUE(VmRunning(a->vmm_pid));
  EXPECT_TRUE(VmRunning(b->vmm_pid));
  ASSERT_TRUE(launcher_->Crash(b->vmm_pid));  // dies while nobody watches
  ASSERT_TRUE(Eventually([&] { return !VmRunning(b->vmm_pid); }));

  ASSERT_NO_FATAL_FAILURE(Open());
  auto ra = m_->GetSandbox("a");
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->state, SandboxState::kRunning);
  EXPECT_EQ(ra->vmm_pid, a->vmm_pid);
  EXPECT_TRUE(m_->CheckToken("a", a->token));
  auto f = m_->ReadFile("a", "/kept");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(S(*f), "across restarts");  // the same guest, not a new one
  auto rb = m_->GetSandbox("b");
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->state, SandboxState::kFailed);
  EXPECT_NE(rb->message.find("lost while the node daemon was down"), std::string::npos) << rb->message;
  // A new sandbox never gets a CID that a re-adopted one holds.
  auto c = Create("c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->cid, a->cid);
  // The re-adopted VM is supervised again.
  ASSERT_TRUE(launcher_->Crash(a->vmm_pid));
  ASSERT_TRUE(Eventually([&] { return m_->GetSandbox("a")->state == SandboxState::kFailed; }));
}

TEST_F(SandboxManagerTest, OpenKillsVmmsNoRecordOwns) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  m_->Shutdown(false);
  m_.reset();
  // A create that died before its first record: the VMM is an orphan.
  fs::create_directories(state_dir_ + "/pool");
  auto stray = launcher_->Spawn(vmm::LaunchSpec::Parse({"pool", "--mem", "64M", "--vcpus", "1", "--control",
                                                        state_dir_ + "/sock/stray.ctl", "--id", "stray"})
                                    .value(),
                                state_dir_ + "/pool/stray.log");
  ASSERT_TRUE(stray.ok()) << stray.status().ToString();
  const pid_t pid = (*stray)->pid();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_FALSE(VmRunning(pid));
  EXPECT_FALSE(fs::exists(state_dir_ + "/sock/stray.ctl"));

  // One found later, once old enough, by the periodic sweep.
  auto late = launcher_->Spawn(vmm::LaunchSpec::Parse({"pool", "--mem", "64M", "--vcpus", "1", "--control",
                                                       state_dir_ + "/sock/late.ctl", "--id", "late"})
                                   .value(),
                               state_dir_ + "/pool/late.log");
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(m_->SweepOrphans(120s), 0u);  // young: may be mid-create
  launcher_->AddAge(600);
  EXPECT_EQ(m_->SweepOrphans(120s), 1u);
  EXPECT_TRUE(Eventually([&] { return !VmRunning((*late)->pid()); }));
}

TEST_F(SandboxManagerTest, TtlExpiryDeletesOnlyExpiredSandboxes) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto a = Create("a", {}, 60);
  auto b = Create("b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->expires_at.has_value());
  EXPECT_FALSE(b->expires_at.has_value());
  clock_offset_s_ = 30;
  EXPECT_TRUE(m_->SweepExpired().empty());
  clock_offset_s_ = 61;
  EXPECT_EQ(m_->SweepExpired(), std::vector<std::string>{"a"});
  EXPECT_EQ(m_->GetSandbox("a").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(VmRunning(a->vmm_pid));
  EXPECT_TRUE(m_->GetSandbox("b").ok());
  // A fork child's TTL is its own when given, else its source's.
  ForkRequest req;
  req.source_id = "b";
  req.ttl_seconds = 10;
  auto kids = m_->ForkSandbox(req);
  ASSERT_TRUE(kids.ok()) << kids.status().ToString();
  clock_offset_s_ = 72;
  EXPECT_EQ(m_->SweepExpired(), std::vector<std::string>{(*kids)[0].id});
  EXPECT_TRUE(m_->GetSandbox("b").ok());
}

TEST_F(SandboxManagerTest, VmmCrashFailsTheSandboxAndFreesItsResources) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto a = Create("a", {{"kubicle.dev/run", "r1"}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(SandboxesHoldMib(*m_, 64)) << m_->usage().mem_mib;
  ASSERT_TRUE(launcher_->Crash(a->vmm_pid, 128 + 9));
  Result<SandboxInfo> info = Status::Unavailable("not yet");
  ASSERT_TRUE(Eventually([&] {
    info = m_->GetSandbox("a");
    return info.ok() && info->state == SandboxState::kFailed;
  }));
  EXPECT_NE(info->message.find("killed by signal 9"), std::string::npos) << info->message;
  EXPECT_NE(info->message.find("crashed"), std::string::npos) << info->message;  // vmm.log's tail
  EXPECT_TRUE(SandboxesHoldMib(*m_, 0)) << m_->usage().mem_mib;
  EXPECT_FALSE(fs::exists(state_dir_ + "/sock/" + std::to_string(a->cid) + ".ctl"));
  auto exec = m_->Exec("a", {});
  EXPECT_EQ(exec.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(m_->GetSandboxStats("a").status().code(), StatusCode::kOk);
  // The record stays (Failed) until deleted.
  ASSERT_TRUE(m_->DeleteSandbox("a").ok());
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/a"));
}

// With the sandbox network off a sandbox has no namespace (NetnsPathOf):
// its ports are refused before any connect, and a missing or crashed
// sandbox says so first.
TEST_F(SandboxManagerTest, GuestPortsNeedARunningSandboxWithANetwork) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  EXPECT_EQ(m_->ConnectGuestPort("nope", 3000).status().code(), StatusCode::kNotFound);
  auto a = Create("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto port = m_->ConnectGuestPort("a", 3000);
  EXPECT_EQ(port.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(port.status().message().find("has no network"), std::string::npos)
      << port.status().ToString();
  ASSERT_TRUE(launcher_->Crash(a->vmm_pid, 128 + 9));
  ASSERT_TRUE(Eventually([&] {
    auto info = m_->GetSandbox("a");
    return info.ok() && info->state == SandboxState::kFailed;
  }));
  auto failed = m_->ConnectGuestPort("a", 3000);
  EXPECT_EQ(failed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(failed.status().message().find("is Failed"), std::string::npos)
      << failed.status().ToString();
}

TEST_F(SandboxManagerTest, VmmDyingMidRestoreFailsTheCreateCleanly) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  launcher_->InjectFault("restore", FakeVmmLauncher::Fault::kCrash);
  auto a = Create("a");
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("restore"), std::string::npos) << a.status().ToString();
  EXPECT_EQ(m_->GetSandbox("a").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/a"));
  EXPECT_TRUE(SandboxesHoldMib(*m_, 0)) << m_->usage().mem_mib;
  // The next create works, from another pool VM.
  auto b = Create("a");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(Run("a", {"echo", "hi"}), "hi\n");
}

TEST_F(SandboxManagerTest, CapacityIsEnforcedAndPoolVmsOfOtherShapesAreEvicted) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  std::vector<std::string> made;
  Status last;
  for (int i = 0; i < 20 && last.ok(); ++i) {
    auto s = Create("s" + std::to_string(i));
    last = s.status();
    if (s.ok()) made.push_back(s->id);
  }
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted) << last.ToString();
  EXPECT_EQ(made.size(), 1024u / 64);  // the pool VM was taken, not kept aside
  ASSERT_TRUE(m_->DeleteSandbox(made[0]).ok());
  EXPECT_TRUE(Create("again").ok());
}

// Suspend and resume over the fake VMM (docs/node.md, "Suspend and
// resume"): the VM goes and its capacity with it, the record says
// Suspended and a restarted manager adopts it so, resume restores the
// sandbox's own snapshot into a pool VM with its own CID and sockets.
TEST_F(SandboxManagerTest, SuspendFreesTheVmSurvivesARestartAndResumes) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto a = Create("a", {}, 600);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(SandboxesHoldMib(*m_, 64)) << m_->usage().mem_mib;
  auto s = m_->SuspendSandbox("a");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->state, SandboxState::kSuspended);
  EXPECT_EQ(s->expires_at, a->expires_at);  // the TTL keeps counting
  EXPECT_TRUE(Eventually([&] { return !VmRunning(a->vmm_pid); }));
  EXPECT_TRUE(SandboxesHoldMib(*m_, 0)) << m_->usage().mem_mib;
  EXPECT_GT(m_->usage().suspended_bytes, 0u);
  EXPECT_EQ(m_->usage().suspended_bytes, s->suspended_bytes);
  auto rec = ReadFileToString(state_dir_ + "/sandboxes/a/record.json");
  ASSERT_TRUE(rec.ok());
  EXPECT_NE(rec->find("\"state\": \"Suspended\""), std::string::npos) << *rec;
  EXPECT_EQ(m_->Exec("a", {}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(m_->ConnectGuestPort("a", 80).status().code(), StatusCode::kFailedPrecondition);

  m_->Shutdown(false);
  m_.reset();
  ASSERT_NO_FATAL_FAILURE(Open());
  auto got = m_->GetSandbox("a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->state, SandboxState::kSuspended);
  EXPECT_EQ(m_->usage().suspended_bytes, s->suspended_bytes);
  EXPECT_TRUE(fs::exists(state_dir_ + "/sandboxes/a/suspend/state")) << "not an orphan";

  auto r = m_->ResumeSandbox("a");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->state, SandboxState::kRunning);
  EXPECT_EQ(r->cid, a->cid);
  EXPECT_TRUE(VmRunning(r->vmm_pid));
  auto vm = launcher_->Vm(r->vmm_pid);
  ASSERT_TRUE(vm);
  EXPECT_EQ(vm->cid, a->cid);
  EXPECT_EQ(vm->id, "a");
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/a/suspend"));
  EXPECT_EQ(m_->usage().suspended_bytes, 0u);
  EXPECT_EQ(Run("a", {"echo", "back"}), "back\n");
  EXPECT_TRUE(m_->CheckToken("a", a->token));
}

// A failed snapshot leaves the sandbox running; a failed restore leaves it
// suspended with its snapshot; both can be tried again.
TEST_F(SandboxManagerTest, FailedSuspendOrResumeChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto a = Create("a");
  ASSERT_TRUE(a.ok());
  launcher_->InjectFault("snapshot", FakeVmmLauncher::Fault::kError);
  EXPECT_FALSE(m_->SuspendSandbox("a").ok());
  EXPECT_EQ(m_->GetSandbox("a")->state, SandboxState::kRunning);
  EXPECT_TRUE(VmRunning(a->vmm_pid));
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/a/suspend"));
  EXPECT_EQ(m_->usage().suspended_bytes, 0u);
  EXPECT_EQ(Run("a", {"echo", "still"}), "still\n");

  ASSERT_TRUE(m_->SuspendSandbox("a").ok());
  const uint64_t bytes = m_->usage().suspended_bytes;
  launcher_->InjectFault("restore", FakeVmmLauncher::Fault::kError);
  EXPECT_FALSE(m_->ResumeSandbox("a").ok());
  EXPECT_EQ(m_->GetSandbox("a")->state, SandboxState::kSuspended);
  EXPECT_TRUE(fs::exists(state_dir_ + "/sandboxes/a/suspend/state"));
  EXPECT_EQ(m_->usage().suspended_bytes, bytes);
  auto r = m_->ResumeSandbox("a");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Run("a", {"echo", "again"}), "again\n");
}

// Delete and TTL expiry of suspended sandboxes leave no files; the suspend
// disk budget refuses a suspend it cannot hold.
TEST_F(SandboxManagerTest, SuspendedSandboxesExpireDeleteAndAreBudgeted) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  ASSERT_TRUE(Create("a", {}, 60).ok());
  ASSERT_TRUE(Create("b").ok());
  ASSERT_TRUE(m_->SuspendSandbox("a").ok());
  ASSERT_TRUE(m_->SuspendSandbox("b").ok());
  clock_offset_s_ = 61;
  EXPECT_EQ(m_->SweepExpired(), std::vector<std::string>{"a"});
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/a"));
  ASSERT_TRUE(m_->DeleteSandbox("b").ok());
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/b"));
  EXPECT_EQ(m_->usage().suspended_bytes, 0u);
  m_->Shutdown(true);
  m_.reset();

  ASSERT_TRUE(fs::remove_all(state_dir_) > 0);
  ASSERT_TRUE(fs::create_directory(state_dir_));
  NodeConfig c = Config();
  c.capacity_suspend_disk_mib = 64;  // less than one 64 MiB guest + 1 MiB
  auto m = SandboxManager::Open(c, nullptr);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  m_ = std::move(m).value();
  TemplateSpec spec;
  spec.name = "tg";
  spec.kernel = kernel_;
  spec.mem_mib = 64;
  ASSERT_TRUE(m_->PutTemplate(spec).ok());
  ASSERT_TRUE(Eventually([&] { return m_->GetTemplate("tg")->state == TemplateState::kReady; }));
  ASSERT_TRUE(Create("c").ok());
  auto refused = m_->SuspendSandbox("c");
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_EQ(m_->GetSandbox("c")->state, SandboxState::kRunning);
  EXPECT_EQ(m_->usage().suspend_disk_bytes, 64u << 20);
}

}  // namespace
}  // namespace kubicle::noderuntime
