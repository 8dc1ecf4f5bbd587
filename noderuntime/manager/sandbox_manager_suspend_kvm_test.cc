// kvm tests of SandboxManager's suspend and resume with real kubicle-vmm
// processes and the test guest: repeated cycles keep memory, RAM files and
// disk writes (every earlier one, after every resume); a daemon restart
// while suspended; a crash between snapshot and record; delete and TTL of
// a suspended sandbox leave nothing; the suspend disk budget refuses.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager_test_util.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using guest::client::AgentClient;
using guest::protocol::Bytes;
using testing::ManagerTest;
namespace fs = std::filesystem;

Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string S(const Bytes& b) { return std::string(b.begin(), b.end()); }

bool ProcessAlive(int pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// One 512-byte sector whose bytes say which cycle wrote it.
Bytes Sector(int cycle) {
  Bytes b(512);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(cycle * 31 + i);
  return b;
}

class SuspendKvmTest : public ManagerTest {
 protected:
  // "tgd": the test guest with a writable 4 MiB disk, so suspend freezes
  // disk layers into the sandbox's directory as well as writing memory.
  void OpenAndBakeWithDisk() {
    ASSERT_TRUE(Reopen().ok());
    disk_ = state_dir_ + "-disk.img";
    int fd = ::open(disk_.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 4 << 20), 0);
    ::close(fd);
    TemplateSpec spec;
    spec.name = "tgd";
    spec.kernel = KUBICLE_TESTGUEST_ELF;
    spec.mem_mib = 64;
    spec.disks = {disk_};
    ASSERT_TRUE(m_->PutTemplate(spec).ok());
    auto t = WaitTemplate("tgd");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_EQ(t->state, TemplateState::kReady) << t->message;
  }
  void TearDown() override {
    ManagerTest::TearDown();
    if (!disk_.empty()) ::unlink(disk_.c_str());
  }
  Result<SandboxInfo> CreateOf(const std::string& tmpl, const std::string& id) {
    SandboxSpec s;
    s.id = id;
    s.template_name = tmpl;
    return m_->CreateSandbox(s);
  }
  // The guest's agent directly (disk and memory calls the service has not).
  std::unique_ptr<AgentClient> Agent(const SandboxInfo& info) {
    auto c = AgentClient::ConnectVsock(state_dir_ + "/sock/" + std::to_string(info.cid) + ".vsock",
                                       guest::protocol::kAgentVsockPort, {}, guest::client::DeadlineIn(10s));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  size_t LayerFiles(const std::string& id) const {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(state_dir_ + "/sandboxes/" + id, ec))
      if (e.path().filename().string().find(".layer") != std::string::npos) ++n;
    return n;
  }
  std::string disk_;
};

// The class of bug where files written before one suspend vanish after a
// later resume (a lost layer, a snapshot taken from the wrong chain): every
// cycle writes a RAM file and a disk sector before suspending, and after
// every resume ALL earlier ones must read back, with the filled memory's
// checksum and the guest's boot id (the same machine, never rebooted)
// unchanged. 18 cycles: past the point where the VMM flattens the chain
// (16 layers), so a collected layer that was still needed would show.
TEST_F(SuspendKvmTest, RepeatedCyclesLoseNothing) {
  OpenAndBakeWithDisk();
  auto sb = CreateOf("tgd", "cyc");
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  auto agent = Agent(*sb);
  ASSERT_TRUE(agent);
  constexpr uint64_t kFill = 16 << 20;
  ASSERT_TRUE(agent->MemFill(77, kFill).ok());
  const uint64_t want_sum = guest::protocol::ExpectedMemChecksum(77, kFill);
  auto ident = agent->Identity();
  ASSERT_TRUE(ident.ok());
  const Bytes boot_id = ident->boot_id;
  agent.reset();

  constexpr int kCycles = 18, kRamFiles = 12;  // the test guest holds 16 RAM files
  int last_pid = sb->vmm_pid;
  for (int c = 0; c < kCycles; ++c) {
    SCOPED_TRACE("cycle " + std::to_string(c));
    if (c < kRamFiles) {
      ASSERT_TRUE(m_->WriteFile("cyc", "/cycle/" + std::to_string(c),
                                B("written before suspend " + std::to_string(c)), 0644).ok());
    }
    agent = Agent(*m_->GetSandbox("cyc"));
    ASSERT_TRUE(agent);
    ASSERT_TRUE(agent->DiskWrite(0, 8 * c, Sector(c)).ok());  // no flush: the freeze must sync it
    agent.reset();

    auto s = m_->SuspendSandbox("cyc");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->state, SandboxState::kSuspended);
    EXPECT_GT(s->suspended_bytes, 0u);
    EXPECT_TRUE(s->suspended_at.has_value());
    EXPECT_EQ(s->vmm_pid, 0);
    EXPECT_FALSE(ProcessAlive(last_pid)) << "the VM process outlived its suspend";
    EXPECT_TRUE(fs::exists(state_dir_ + "/sandboxes/cyc/suspend/memory"));
    EXPECT_EQ(m_->usage().suspended_bytes, s->suspended_bytes);
    auto refused = m_->ReadFile("cyc", "/cycle/0");
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("Suspended"), std::string::npos);
    EXPECT_TRUE(m_->SuspendSandbox("cyc").ok());  // idempotent
    EXPECT_EQ(m_->GetSandbox("cyc")->state, SandboxState::kSuspended);

    auto r = m_->ResumeSandbox("cyc");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->state, SandboxState::kRunning);
    EXPECT_EQ(r->cid, sb->cid);
    EXPECT_NE(r->vmm_pid, last_pid);
    last_pid = r->vmm_pid;
    EXPECT_FALSE(r->suspended_at.has_value());
    EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/cyc/suspend"));
    EXPECT_EQ(m_->usage().suspended_bytes, 0u);
    EXPECT_TRUE(m_->ResumeSandbox("cyc").ok());  // idempotent

    for (int k = 0; k <= c && k < kRamFiles; ++k) {
      auto f = m_->ReadFile("cyc", "/cycle/" + std::to_string(k));
      ASSERT_TRUE(f.ok()) << "RAM file of cycle " << k << ": " << f.status().ToString();
      EXPECT_EQ(S(*f), "written before suspend " + std::to_string(k));
    }
    agent = Agent(*r);
    ASSERT_TRUE(agent);
    for (int k = 0; k <= c; ++k) {
      auto d = agent->DiskRead(0, 8 * k, 1);
      ASSERT_TRUE(d.ok()) << "disk sector of cycle " << k << ": " << d.status().ToString();
      EXPECT_EQ(*d, Sector(k)) << "disk sector of cycle " << k;
    }
    auto sum = agent->MemChecksum();
    ASSERT_TRUE(sum.ok());
    EXPECT_EQ(sum->checksum, want_sum);
    auto id = agent->Identity();
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(id->boot_id, boot_id);
    EXPECT_EQ(id->cid, sb->cid);
    agent.reset();
    // Chains stay bounded: at most the VMM's 16 frozen layers, its live
    // overlay and one flatten's output.
    EXPECT_LE(LayerFiles("cyc"), 18u);
  }
  ExecOptions eo;
  eo.request.argv = {"hostname"};
  auto h = m_->Exec("cyc", eo);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(S(h->stdout_data), "cyc\n");  // a resume keeps the guest's hostname
  auto metrics = metrics_->Render();
  EXPECT_NE(metrics.find("kubicle_suspend_seconds_count 18"), std::string::npos);
  EXPECT_NE(metrics.find("kubicle_resume_seconds_count 18"), std::string::npos);
  ASSERT_TRUE(m_->DeleteSandbox("cyc").ok());
  EXPECT_EQ(StateFiles(), 0u);
}

// Suspended across a node daemon restart: Open() adopts it without a VMM,
// its snapshot and layers are not orphans, and it resumes intact.
TEST_F(SuspendKvmTest, RestartWhileSuspendedThenResume) {
  OpenAndBake();
  auto sb = Create("rs");
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  ASSERT_TRUE(m_->WriteFile("rs", "/kept", B("across the restart"), 0644).ok());
  auto s = m_->SuspendSandbox("rs");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const uint64_t bytes = s->suspended_bytes;
  m_->Shutdown(false);
  ASSERT_TRUE(Reopen().ok());
  auto got = m_->GetSandbox("rs");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->state, SandboxState::kSuspended);
  EXPECT_EQ(got->suspended_bytes, bytes);
  EXPECT_EQ(m_->usage().suspended_bytes, bytes);
  EXPECT_TRUE(fs::exists(state_dir_ + "/sandboxes/rs/suspend/state"));
  EXPECT_TRUE(m_->CheckToken("rs", sb->token));
  auto r = m_->ResumeSandbox("rs");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto f = m_->ReadFile("rs", "/kept");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(S(*f), "across the restart");
  // And once more across a restart while running again.
  m_->Shutdown(false);
  ASSERT_TRUE(Reopen().ok());
  EXPECT_EQ(m_->GetSandbox("rs")->state, SandboxState::kRunning);
  EXPECT_EQ(S(*m_->ReadFile("rs", "/kept")), "across the restart");
}

// A daemon that died after the snapshot was written but before the record
// said Suspended: the VM (left paused) is the sandbox; the snapshot goes.
TEST_F(SuspendKvmTest, CrashBetweenSnapshotAndRecordKeepsTheRunningVm) {
  OpenAndBake();
  auto sb = Create("cr");
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  ASSERT_TRUE(m_->WriteFile("cr", "/f", B("still here"), 0644).ok());
  const std::string control = state_dir_ + "/sock/" + std::to_string(sb->cid) + ".ctl";
  auto snap = vmm::control::ControlClient(control).Snapshot(
      {.dir = state_dir_ + "/sandboxes/cr/suspend", .resume = false}, 60s);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  m_->Shutdown(false);
  ASSERT_TRUE(Reopen().ok());
  auto got = m_->GetSandbox("cr");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, SandboxState::kRunning) << got->message;
  EXPECT_EQ(got->vmm_pid, sb->vmm_pid);
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/cr/suspend"));
  auto f = m_->ReadFile("cr", "/f");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(S(*f), "still here");
}

// Delete and TTL expiry of a suspended sandbox remove everything.
TEST_F(SuspendKvmTest, DeleteAndExpiryWhileSuspendedLeaveNothing) {
  OpenAndBake();
  ASSERT_TRUE(Create("d1").ok());
  SandboxSpec s;
  s.id = "d2";
  s.template_name = "tg";
  s.ttl_seconds = 60;
  ASSERT_TRUE(m_->CreateSandbox(s).ok());
  ASSERT_TRUE(m_->SuspendSandbox("d1").ok());
  ASSERT_TRUE(m_->SuspendSandbox("d2").ok());
  // The TTL keeps counting while suspended.
  clock_offset_s_ = 61;
  auto expired = m_->SweepExpired();
  ASSERT_EQ(expired, std::vector<std::string>{"d2"});
  EXPECT_EQ(m_->GetSandbox("d2").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/d2"));
  ASSERT_TRUE(m_->DeleteSandbox("d1").ok());
  EXPECT_EQ(StateFiles(), 0u);
  EXPECT_EQ(m_->usage().suspended_bytes, 0u);
  EXPECT_TRUE(Quiesce(kPoolVms)) << DescribeVmmProcesses();
  EXPECT_EQ(Cgroups(), 0u);
}

// A suspend the budget cannot hold is refused and changes nothing; exec,
// files and resume of states other than Suspended say why.
TEST_F(SuspendKvmTest, SuspendDiskBudgetRefusesAndStatesAreChecked) {
  // A suspend holds its guest's whole RAM plus 1 MiB (65 MiB) while it
  // writes, then what its sparse snapshot takes: one fits in 65 MiB, and a
  // second does not while the first one's snapshot is there.
  config_.capacity_suspend_disk_mib = 65;
  OpenAndBake();
  ASSERT_TRUE(Create("b1").ok());
  ASSERT_TRUE(Create("b2").ok());
  EXPECT_EQ(m_->ResumeSandbox("b1")->state, SandboxState::kRunning);  // Running: Ok
  ASSERT_TRUE(m_->SuspendSandbox("b1").ok());
  auto refused = m_->SuspendSandbox("b2");
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("suspend disk"), std::string::npos);
  auto b2 = m_->GetSandbox("b2");
  EXPECT_EQ(b2->state, SandboxState::kRunning);
  EXPECT_FALSE(fs::exists(state_dir_ + "/sandboxes/b2/suspend"));
  ASSERT_TRUE(m_->WriteFile("b2", "/ok", B("1"), 0644).ok());
  ExecOptions eo;
  eo.request.argv = {"true"};
  auto ex = m_->Exec("b1", eo);
  EXPECT_EQ(ex.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(m_->GetSandboxStats("b1").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(m_->ForkSandbox({.source_id = "b1"}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(m_->SuspendSandbox("nope").status().code(), StatusCode::kNotFound);
  // Resuming b1 frees its share: b2 fits now.
  ASSERT_TRUE(m_->ResumeSandbox("b1").ok());
  ASSERT_TRUE(m_->SuspendSandbox("b2").ok());
  ASSERT_TRUE(m_->ResumeSandbox("b2").ok());
  EXPECT_EQ(S(*m_->ReadFile("b2", "/ok")), "1");
}

}  // namespace
}  // namespace kubicle::noderuntime
