// kvm tests of workspaces on the test guest (docs/workspaces.md): a
// workspace plugged into a restored VM's empty slot (the guest sees its
// capacity change), written raw by the guest, read back on the host
// through kubicle-ext4 once the VM is gone; one writer (creates, runs,
// forks, host file calls and deletes refused while attached); a per-call
// run holding it only for the call; a VMM crash and a node restart.
#include <signal.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "noderuntime/ext4/ext4_client.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager_test_util.h"
#include "noderuntime/testing/eventually.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using testing::ManagerTest;
namespace fs = std::filesystem;

constexpr uint64_t kSector = 512;
constexpr uint64_t kBlock = 4096;

guest::protocol::ByteSpan Span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class WorkspaceKvmTest : public ManagerTest {
 protected:
  std::string Image(const std::string& name) { return state_dir_ + "/workspaces/" + name + "/disk.img"; }
  std::string ReadFile(const std::string& ws, const std::string& path, Status* st = nullptr) {
    std::string out;
    Status r = m_->ReadWorkspaceFile(ws, path, [&](const guest::client::FileChunk& c) {
      out.append(reinterpret_cast<const char*>(c.data.data()), c.data.size());
      return Status::Ok();
    });
    if (st) *st = r;
    return out;
  }
  // A second agent connection to the sandbox's guest, for its raw disk calls.
  std::unique_ptr<guest::client::AgentClient> Agent(const SandboxInfo& sb) {
    auto a = guest::client::AgentClient::ConnectVsock(
        state_dir_ + "/sock/" + std::to_string(sb.cid) + ".vsock", guest::protocol::kAgentVsockPort,
        {}, guest::client::DeadlineIn(5s));
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? std::move(*a) : nullptr;
  }
  Result<SandboxInfo> CreateWith(const std::string& id, const std::string& workspace) {
    SandboxSpec s;
    s.id = id;
    s.template_name = "tg";
    s.workspace = workspace;
    return m_->CreateSandbox(s);
  }
};

TEST_F(WorkspaceKvmTest, TheGuestWritesTheWorkspaceAndTheHostReadsItBackWithoutAVm) {
  OpenAndBake();
  auto t = m_->GetTemplate("tg");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->workspace_slot);
  auto ws = m_->PutWorkspace({.name = "ws-1", .size_mib = 8});
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  ASSERT_TRUE(m_->WriteWorkspaceFile("ws-1", "/from-host.txt", Span("written on the host\n"), 0644).ok());

  // Without a workspace the slot is an empty disk.
  auto plain = CreateWith("plain", "");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  {
    auto a = Agent(*plain);
    ASSERT_TRUE(a);
    auto disks = a->DiskInfo(guest::client::DeadlineIn(5s));
    ASSERT_TRUE(disks.ok()) << disks.status().ToString();
    ASSERT_EQ(disks->size(), 1u);
    EXPECT_EQ((*disks)[0].id, "workspace");
    EXPECT_EQ((*disks)[0].capacity_sectors, 0u);
  }

  auto sb = CreateWith("sb-ws", "ws-1");
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb->workspace, "ws-1");
  EXPECT_EQ(m_->GetWorkspace("ws-1")->attached_to, "sb-ws");
  auto a = Agent(*sb);
  ASSERT_TRUE(a);
  // The restored guest was baked with capacity 0: it sees the workspace's
  // size after the config-change interrupt.
  auto disks = a->DiskInfo(guest::client::DeadlineIn(5s));
  ASSERT_TRUE(disks.ok());
  ASSERT_EQ(disks->size(), 1u);
  EXPECT_EQ((*disks)[0].capacity_sectors, (8u << 20) / kSector);
  EXPECT_FALSE((*disks)[0].read_only);
  // What the guest reads is the workspace: ext4's magic in the superblock.
  auto sbk = a->DiskRead(0, 2, 2, guest::client::DeadlineIn(5s));
  ASSERT_TRUE(sbk.ok()) << sbk.status().ToString();
  EXPECT_EQ((*sbk)[56], 0x53);
  EXPECT_EQ((*sbk)[57], 0xEF);

  // The guest writes a new file system state: the host's copy of the image
  // with one more file (made through the helper on the copy), sent as the
  // 4 KiB blocks that differ, through the guest's virtio-blk.
  const std::string before = ReadAll(Image("ws-1"));
  const std::string copy = state_dir_ + "/copy.img";
  { std::ofstream(copy, std::ios::binary) << before; }
  ext4::Ext4Client helper({.helper = fs::path(KUBICLE_VMM_BIN).parent_path().string() + "/kubicle-ext4"});
  ASSERT_TRUE(helper.Write(copy, "/dir/from-guest.txt", Span("written by the guest\n"), 0600).ok());
  const std::string after = ReadAll(copy);
  ASSERT_EQ(before.size(), after.size());
  size_t blocks = 0;
  for (uint64_t off = 0; off < after.size(); off += kBlock) {
    if (before.compare(off, kBlock, after, off, kBlock) == 0) continue;
    ++blocks;
    Status w = a->DiskWrite(0, off / kSector, Span(after.substr(off, kBlock)), false,
                            guest::client::DeadlineIn(10s));
    ASSERT_TRUE(w.ok()) << w.ToString();
  }
  EXPECT_GT(blocks, 0u);
  ASSERT_TRUE(a->DiskWrite(0, 0, Span(after.substr(0, kSector)), /*flush=*/true,
                           guest::client::DeadlineIn(10s)).ok());
  a.reset();

  // While attached: one writer.
  Status st;
  (void)ReadFile("ws-1", "/from-host.txt", &st);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("sb-ws"), std::string::npos) << st.ToString();

  ASSERT_TRUE(m_->DeleteSandbox("sb-ws").ok());
  EXPECT_EQ(m_->GetWorkspace("ws-1")->attached_to, "");
  // No VM runs it now: the host reads what the guest wrote, and its own file.
  EXPECT_EQ(ReadFile("ws-1", "/dir/from-guest.txt", &st), "written by the guest\n") << st.ToString();
  EXPECT_EQ(ReadFile("ws-1", "/from-host.txt"), "written on the host\n");
  auto stat = m_->StatWorkspaceFile("ws-1", "/dir/from-guest.txt");
  ASSERT_TRUE(stat.ok());
  EXPECT_EQ(stat->mode, 0600u);
  EXPECT_EQ(std::system(("e2fsck -fn " + Image("ws-1") + " >/dev/null 2>&1").c_str()), 0);
  ASSERT_TRUE(m_->DeleteSandbox("plain").ok());
  ASSERT_TRUE(m_->DeleteWorkspace("ws-1").ok());
  EXPECT_FALSE(fs::exists(state_dir_ + "/workspaces/ws-1"));
}

TEST_F(WorkspaceKvmTest, OneWriterForkAndDeleteRefusalsNameTheHolder) {
  OpenAndBake();
  ASSERT_TRUE(m_->PutWorkspace({.name = "ws-1", .size_mib = 8}).ok());
  auto sb = CreateWith("holder", "ws-1");
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  auto second = CreateWith("second", "ws-1");
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("attached to holder"), std::string::npos)
      << second.status().ToString();
  EXPECT_EQ(m_->GetSandbox("second").status().code(), StatusCode::kNotFound) << "nothing left of it";
  RunOptions run;
  run.template_name = "tg";
  run.workspace = "ws-1";
  run.exec.request.argv = {"true"};
  EXPECT_EQ(m_->Run(run).status().code(), StatusCode::kFailedPrecondition);
  ForkRequest fork;
  fork.source_id = "holder";
  auto f = m_->ForkSandbox(fork);
  EXPECT_EQ(f.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(f.status().message().find("cannot be forked"), std::string::npos);
  EXPECT_EQ(m_->DeleteWorkspace("ws-1").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(m_->WriteWorkspaceFile("ws-1", "/x", Span("x"), 0644).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CreateWith("nows", "nope").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(m_->DeleteSandbox("holder").ok());
  auto next = CreateWith("second", "ws-1");
  ASSERT_TRUE(next.ok()) << "free again: " << next.status().ToString();
  ASSERT_TRUE(m_->DeleteSandbox("second").ok());
}

TEST_F(WorkspaceKvmTest, ARunHoldsTheWorkspaceForTheCallOnly) {
  OpenAndBake();
  ASSERT_TRUE(m_->PutWorkspace({.name = "ws-1", .size_mib = 8}).ok());
  ASSERT_TRUE(m_->WriteWorkspaceFile("ws-1", "/in.txt", Span("input"), 0644).ok());
  RunOptions run;
  run.template_name = "tg";
  run.workspace = "ws-1";
  run.exec.request.argv = {"echo", "ran"};
  run.exec.timeout = 10s;
  std::string holder_during;
  run.exec.io.on_output = [&](guest::protocol::OutputStream, guest::protocol::ByteSpan) {
    holder_during = m_->GetWorkspace("ws-1")->attached_to;
  };
  auto r = m_->Run(run);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(holder_during.rfind("run-", 0), 0u) << holder_during;
  // Released before Run returned: the files are the caller's at once.
  EXPECT_EQ(m_->GetWorkspace("ws-1")->attached_to, "");
  Status st;
  EXPECT_EQ(ReadFile("ws-1", "/in.txt", &st), "input") << st.ToString();
  for (int i = 0; i < 5; ++i) {
    run.exec.io = {};
    ASSERT_TRUE(m_->Run(run).ok()) << i;
  }
  m_->DrainRunTeardowns();
  EXPECT_TRUE(Quiesce(kPoolVms));
}

TEST_F(WorkspaceKvmTest, AVmmCrashReleasesItAndARestartKeepsItsHolder) {
  OpenAndBake();
  ASSERT_TRUE(m_->PutWorkspace({.name = "ws-1", .size_mib = 8}).ok());
  ASSERT_TRUE(m_->PutWorkspace({.name = "ws-2", .size_mib = 8}).ok());
  auto crash = CreateWith("crash", "ws-1");
  ASSERT_TRUE(crash.ok()) << crash.status().ToString();
  ASSERT_EQ(::kill(crash->vmm_pid, SIGKILL), 0);
  ASSERT_TRUE(testing::Eventually([&] { return m_->GetWorkspace("ws-1")->attached_to.empty(); }, 10s));
  EXPECT_EQ(m_->GetSandbox("crash")->state, SandboxState::kFailed);
  auto keep = CreateWith("keep", "ws-2");
  ASSERT_TRUE(keep.ok());
  ASSERT_TRUE(Reopen().ok());  // the VM runs on; the new manager adopts it
  EXPECT_EQ(m_->GetWorkspace("ws-2")->attached_to, "keep");
  EXPECT_EQ(m_->GetWorkspace("ws-1")->attached_to, "");
  EXPECT_EQ(CreateWith("other", "ws-2").status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m_->DeleteSandbox("keep").ok());
  ASSERT_TRUE(m_->DeleteSandbox("crash").ok());
  EXPECT_EQ(m_->GetWorkspace("ws-2")->attached_to, "");
}

}  // namespace
}  // namespace kubicle::noderuntime
