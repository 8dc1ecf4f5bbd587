// kvm tests of snapshot and restore through real kubicle-vmm processes and
// the test guest: the snapshot control command, `kubicle-vmm restore` into
// fresh processes (memory, RAM files, identity, side-by-side clones) and the
// refusal of damaged snapshots.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "snapshot/snapshot_dir.h"
#include "vmm/testing/vm_process.h"

namespace kubicle::vmm {
namespace {

using namespace std::chrono_literals;
using guest::protocol::Bytes;
using testing::VmProcess;
using testing::VmProcessOptions;
namespace fs = std::filesystem;

constexpr uint64_t kFillBytes = 256 * 1024;

class VmSnapshotKvmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
    char tmpl[] = "/tmp/kubicle-snap-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    // Snapshot files are read-only; make them deletable.
    std::error_code ec;
    for (auto& e : fs::recursive_directory_iterator(dir_, ec))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  static VmProcessOptions Options() {
    VmProcessOptions o;
    o.vmm_binary = KUBICLE_VMM_BIN;
    o.kernel = KUBICLE_TESTGUEST_ELF;
    return o;
  }
  std::unique_ptr<VmProcess> Start(const VmProcessOptions& o) {
    auto vm = VmProcess::Start(o);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    return vm.ok() ? std::move(vm).value() : nullptr;
  }
  std::unique_ptr<VmProcess> Restore(const std::string& snap, uint64_t cid) {
    VmProcessOptions o = Options();
    o.restore_from = snap;
    o.cid = cid;
    return Start(o);
  }

  // Boots the guest, writes a RAM file and fills memory, snapshots it into
  // dir_/name; returns the checksum the guest reported before the snapshot.
  uint64_t BootFillAndSnapshot(const std::string& name, bool resume,
                               std::unique_ptr<VmProcess>* out = nullptr) {
    auto vm = Start(Options());
    if (!vm) return 0;
    auto agent = vm->ConnectAgent(60s);
    EXPECT_TRUE(agent.ok()) << agent.status().ToString();
    if (!agent.ok()) return 0;
    EXPECT_TRUE((*agent)->WriteFile("/data/hello", Bytes{'s', 'n', 'a', 'p'}).ok());
    EXPECT_TRUE((*agent)->MemFill(42, kFillBytes).ok());
    auto sum = (*agent)->MemChecksum();
    EXPECT_TRUE(sum.ok()) << sum.status().ToString();
    auto r = vm->control().Snapshot({dir_ + "/" + name, resume}, 30s);
    EXPECT_TRUE(r.ok()) << r.status().ToString() << vm->VmmLog();
    if (out) *out = std::move(vm);
    return sum.ok() ? sum->checksum : 0;
  }

  std::string dir_;
};

TEST_F(VmSnapshotKvmTest, SnapshotCommandWritesADirectoryThatOpens) {
  std::unique_ptr<VmProcess> vm;
  BootFillAndSnapshot("s1", /*resume=*/true, &vm);
  ASSERT_TRUE(vm);
  auto snap = snapshot::SnapshotDir::Open(dir_ + "/s1");
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_EQ(snap->state().vcpus.size(), 1u);
  EXPECT_EQ(snap->meta().mem_bytes, 64ull << 20);
  ASSERT_EQ(snap->state().virtio.size(), 2u);  // vsock and rng
  // resume=true: the guest keeps answering.
  auto agent = vm->ConnectAgent(10s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  EXPECT_TRUE((*agent)->Ping().ok());
  // An existing target is refused, and the VM keeps running.
  auto again = vm->control().Snapshot({dir_ + "/s1"}, 30s);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status().ToString();
  EXPECT_TRUE((*agent)->Ping().ok());
}

TEST_F(VmSnapshotKvmTest, SnapshotWithResumeFalseStaysPaused) {
  std::unique_ptr<VmProcess> vm;
  BootFillAndSnapshot("s", /*resume=*/false, &vm);
  ASSERT_TRUE(vm);
  auto status = vm->control().GetStatus(10s);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, control::VmState::kPaused);
}

TEST_F(VmSnapshotKvmTest, RestoresSideBySideWithSnapshotMemoryAndOwnCid) {
  uint64_t sum = BootFillAndSnapshot("s", /*resume=*/false);
  ASSERT_NE(sum, 0u);
  auto a = Restore(dir_ + "/s", 10);
  auto b = Restore(dir_ + "/s", 11);
  ASSERT_TRUE(a && b);
  auto agent_a = a->ConnectAgent(10s);
  ASSERT_TRUE(agent_a.ok()) << agent_a.status().ToString() << a->VmmLog();
  auto agent_b = b->ConnectAgent(10s);
  ASSERT_TRUE(agent_b.ok()) << agent_b.status().ToString() << b->VmmLog();
  for (auto* agent : {&*agent_a, &*agent_b}) {
    auto got = (*agent)->MemChecksum();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->checksum, sum);
    auto file = (*agent)->ReadFile("/data/hello");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(*file, (Bytes{'s', 'n', 'a', 'p'}));
  }
  auto id_a = (*agent_a)->Identity();
  auto id_b = (*agent_b)->Identity();
  ASSERT_TRUE(id_a.ok() && id_b.ok());
  EXPECT_EQ(id_a->cid, 10u);
  EXPECT_EQ(id_b->cid, 11u);
  // A write in one clone is invisible to the other.
  ASSERT_TRUE((*agent_a)->MemFill(7, kFillBytes).ok());
  ASSERT_TRUE((*agent_a)->WriteFile("/data/hello", Bytes{'a'}).ok());
  EXPECT_NE((*agent_a)->MemChecksum()->checksum, sum);
  EXPECT_EQ((*agent_b)->MemChecksum()->checksum, sum);
  EXPECT_EQ(*(*agent_b)->ReadFile("/data/hello"), (Bytes{'s', 'n', 'a', 'p'}));
}

TEST_F(VmSnapshotKvmTest, PostRestoreGivesEachCloneItsOwnIdentity) {
  BootFillAndSnapshot("s", /*resume=*/false);
  auto a = Restore(dir_ + "/s", 20);
  auto b = Restore(dir_ + "/s", 21);
  ASSERT_TRUE(a && b);
  std::vector<guest::protocol::IdentityReply> ids;
  int n = 0;
  for (VmProcess* vm : {a.get(), b.get()}) {
    auto agent = vm->ConnectAgent(10s);
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    guest::protocol::PostRestoreRequest req;
    req.entropy_seed = Bytes(32, static_cast<uint8_t>(0x40 + n));
    req.hostname = "clone-" + std::to_string(n);
    req.generation = 100 + n;
    auto gen = (*agent)->PostRestore(req);
    ASSERT_TRUE(gen.ok()) << gen.status().ToString();
    auto id = (*agent)->Identity();
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(id->hostname, req.hostname);
    EXPECT_EQ(id->generation, req.generation);
    ids.push_back(*id);
    ++n;
  }
  EXPECT_NE(ids[0].entropy_digest, ids[1].entropy_digest);
}

TEST_F(VmSnapshotKvmTest, WarmPoolRestoresOnRequest) {
  uint64_t sum = BootFillAndSnapshot("s", /*resume=*/false);
  ASSERT_NE(sum, 0u);
  VmProcessOptions o = Options();
  o.pool = true;
  o.cid = 40;
  auto pool = Start(o);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->WaitForControl(20s).ok()) << pool->VmmLog();
  auto status = pool->control().GetStatus(10s);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, control::VmState::kPooled);
  control::RestoreRequest restore;
  restore.snapshot = dir_ + "/s";
  restore.cid = 41;
  auto r = pool->control().Restore(restore, 30s);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << pool->VmmLog();
  EXPECT_EQ(r->status.state, control::VmState::kRunning);
  EXPECT_EQ(r->status.guest_cid, 41u);
  auto agent = pool->ConnectAgent(10s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString() << pool->VmmLog();
  auto got = (*agent)->MemChecksum();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->checksum, sum);
  EXPECT_EQ((*agent)->Identity()->cid, 41u);
  // One restore per pool VM.
  auto again = pool->control().Restore({.snapshot = dir_ + "/s"}, 30s);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*agent)->Ping().ok());
}

TEST_F(VmSnapshotKvmTest, WarmPoolRefusesAMismatchedOrDamagedSnapshotAndStaysReady) {
  BootFillAndSnapshot("s", /*resume=*/false);
  VmProcessOptions o = Options();
  o.pool = true;
  o.mem = "128M";
  auto pool = Start(o);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->WaitForControl(20s).ok()) << pool->VmmLog();
  auto r = pool->control().Restore({.snapshot = dir_ + "/s"}, 30s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("64 MiB"), std::string::npos) << r.status().ToString();
  auto missing = pool->control().Restore({.snapshot = dir_ + "/nope"}, 30s);
  EXPECT_FALSE(missing.ok());
  auto status = pool->control().GetStatus(10s);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, control::VmState::kPooled);
}

TEST_F(VmSnapshotKvmTest, ASnapshotOfARestoredVmRestoresAgain) {
  uint64_t sum = BootFillAndSnapshot("s", /*resume=*/false);
  auto a = Restore(dir_ + "/s", 12);
  ASSERT_TRUE(a);
  auto agent = a->ConnectAgent(10s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  ASSERT_TRUE((*agent)->WriteFile("/data/second", Bytes{'2'}).ok());
  auto r = a->control().Snapshot({dir_ + "/s2", false}, 30s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto b = Restore(dir_ + "/s2", 13);
  ASSERT_TRUE(b);
  auto agent_b = b->ConnectAgent(10s);
  ASSERT_TRUE(agent_b.ok()) << agent_b.status().ToString() << b->VmmLog();
  EXPECT_EQ((*agent_b)->MemChecksum()->checksum, sum);
  EXPECT_EQ(*(*agent_b)->ReadFile("/data/second"), Bytes{'2'});
  EXPECT_EQ(*(*agent_b)->ReadFile("/data/hello"), (Bytes{'s', 'n', 'a', 'p'}));
  EXPECT_EQ((*agent_b)->Identity()->cid, 13u);
}

// Copies snapshot src to dst with writable files, for damaging it.
void CopyWritable(const std::string& src, const std::string& dst) {
  fs::copy(src, dst, fs::copy_options::recursive);
  for (auto& e : fs::directory_iterator(dst))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
}

TEST_F(VmSnapshotKvmTest, DamagedSnapshotsAreRefusedAndLeaveNothingBehind) {
  BootFillAndSnapshot("s", /*resume=*/false);
  CopyWritable(dir_ + "/s", dir_ + "/truncated");
  fs::resize_file(dir_ + "/truncated/memory", fs::file_size(dir_ + "/truncated/memory") / 2);
  CopyWritable(dir_ + "/s", dir_ + "/corrupt");
  {
    std::fstream f(dir_ + "/corrupt/state", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  struct Case {
    std::string name;
    std::string want;  // in kubicle-vmm's error message
  };
  for (const Case& c : {Case{"truncated", "DataLoss"}, Case{"corrupt", "DataLoss"},
                        Case{"missing", "NotFound"}}) {
    SCOPED_TRACE(c.name);
    auto vm = Restore(dir_ + "/" + c.name, 30);
    ASSERT_TRUE(vm);
    auto code = vm->Wait(20s);
    ASSERT_TRUE(code.ok()) << code.status().ToString();
    EXPECT_EQ(*code, 2) << vm->VmmLog();
    EXPECT_NE(vm->VmmLog().find(c.want), std::string::npos) << vm->VmmLog();
    EXPECT_FALSE(fs::exists(vm->vsock_path()));
    EXPECT_FALSE(fs::exists(vm->control_path()));
  }
}

}  // namespace
}  // namespace kubicle::vmm
