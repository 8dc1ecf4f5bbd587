// kvm tests of copy-on-write disks (vm_disks.cc) through real kubicle-vmm
// processes and the test guest's raw disk I/O: fork gives parent and child
// private disks over shared frozen layers, a snapshot restores the disk as
// it was, the base image is never written, read-only disks stay read-only,
// raw writable disks are refused for snapshot and fork.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "snapshot/snapshot_dir.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/persist.h"
#include "vmm/testing/vm_process.h"

namespace kubicle::vmm {
namespace {

using namespace std::chrono_literals;
using guest::client::AgentClient;
using guest::protocol::Bytes;
using testing::VmProcess;
using testing::VmProcessOptions;
namespace fs = std::filesystem;

constexpr uint64_t kImageBytes = 1 << 20;

Bytes Sector(uint8_t fill) { return Bytes(512, fill); }

Bytes ImageBytes(size_t n, uint8_t salt) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(i * 7 + salt + (i >> 9));
  return b;
}

Bytes ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class VmDiskKvmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
    char tmpl[] = "/tmp/kubicle-disk-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directory(layers());
    base_ = dir_ + "/base.img";
    ro_ = dir_ + "/ro.img";
    std::ofstream(base_, std::ios::binary)
        .write(reinterpret_cast<const char*>(ImageBytes(kImageBytes, 1).data()), kImageBytes);
    std::ofstream(ro_, std::ios::binary)
        .write(reinterpret_cast<const char*>(ImageBytes(kImageBytes, 2).data()), kImageBytes);
  }
  void TearDown() override {
    children_.clear();
    if (dir_.empty()) return;
    std::error_code ec;  // frozen layers are read-only files
    for (auto& e : fs::recursive_directory_iterator(dir_, ec))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string layers() const { return dir_ + "/layers"; }
  VmProcessOptions Options(bool cow = true) const {
    VmProcessOptions o;
    o.vmm_binary = KUBICLE_VMM_BIN;
    o.kernel = KUBICLE_TESTGUEST_ELF;
    o.disks = {base_, ro_ + ",ro"};
    if (cow) o.extra_args = {"--layer-dir", layers()};
    return o;
  }
  std::unique_ptr<VmProcess> Start(const VmProcessOptions& o) {
    auto vm = VmProcess::Start(o);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    return vm.ok() ? std::move(vm).value() : nullptr;
  }
  static std::unique_ptr<AgentClient> Agent(VmProcess& vm) {
    auto a = vm.ConnectAgent(60s);
    EXPECT_TRUE(a.ok()) << a.status().ToString() << vm.VmmLog();
    return a.ok() ? std::move(a).value() : nullptr;
  }
  static Bytes Read(AgentClient& a, uint32_t disk, uint64_t sector) {
    auto r = a.DiskRead(disk, sector, 1);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Bytes{};
  }
  // Forks vm into one child with its sockets in a new directory.
  VmProcess* ForkOne(VmProcess& vm, uint64_t cid) {
    char tmpl[] = "/tmp/kubicle-disk-fork-XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl), nullptr);
    std::string d = tmpl;
    control::ForkRequest fork;
    fork.children = {{.control = d + "/control.sock",
                      .cid = cid,
                      .vsock_uds = d + "/vsock.sock",
                      .serial = d + "/serial.log"}};
    auto r = vm.control().Fork(fork, 60s);
    if (!r.ok()) {
      ADD_FAILURE() << r.status().ToString() << vm.VmmLog();
      fs::remove_all(d);
      return nullptr;
    }
    children_.push_back(VmProcess::Attach(static_cast<pid_t>(r->pids.at(0)), d));
    return children_.back().get();
  }

  std::string dir_, base_, ro_;
  std::vector<std::unique_ptr<VmProcess>> children_;
};

TEST_F(VmDiskKvmTest, ForkGivesParentAndChildPrivateDisks) {
  auto parent = Start(Options());
  ASSERT_TRUE(parent);
  auto pa = Agent(*parent);
  ASSERT_TRUE(pa);
  ASSERT_TRUE(pa->DiskWrite(0, 0, Sector(0xAA), true).ok());
  VmProcess* child = ForkOne(*parent, 40);
  ASSERT_NE(child, nullptr);
  auto ca = Agent(*child);
  ASSERT_TRUE(ca) << child->VmmLog();

  // Both see what was written before the fork.
  EXPECT_EQ(Read(*ca, 0, 0), Sector(0xAA));
  EXPECT_EQ(Read(*pa, 0, 0), Sector(0xAA));
  // Writes after the fork stay on their side.
  ASSERT_TRUE(pa->DiskWrite(0, 1, Sector(0x11), true).ok());
  ASSERT_TRUE(ca->DiskWrite(0, 2, Sector(0x22), true).ok());
  ASSERT_TRUE(ca->DiskWrite(0, 0, Sector(0xCC), true).ok());
  const Bytes original = ImageBytes(kImageBytes, 1);
  auto sector_of = [&](uint64_t s) { return Bytes(original.begin() + s * 512, original.begin() + (s + 1) * 512); };
  EXPECT_EQ(Read(*pa, 0, 2), sector_of(2));
  EXPECT_EQ(Read(*ca, 0, 1), sector_of(1));
  EXPECT_EQ(Read(*pa, 0, 0), Sector(0xAA));
  EXPECT_EQ(Read(*ca, 0, 0), Sector(0xCC));
  EXPECT_EQ(Read(*pa, 0, 1), Sector(0x11));
  EXPECT_EQ(Read(*ca, 0, 2), Sector(0x22));
  // Read-only disks refuse writes in both.
  EXPECT_EQ(ca->DiskWrite(1, 0, Sector(1)).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(pa->DiskWrite(1, 0, Sector(1)).code(), StatusCode::kPermissionDenied);
  // A fork of the child sees the child's disk.
  VmProcess* grandchild = ForkOne(*child, 41);
  ASSERT_NE(grandchild, nullptr);
  auto ga = Agent(*grandchild);
  ASSERT_TRUE(ga);
  EXPECT_EQ(Read(*ga, 0, 0), Sector(0xCC));
  EXPECT_EQ(Read(*ga, 0, 2), Sector(0x22));
  EXPECT_EQ(Read(*ga, 0, 1), sector_of(1));
  // The base images were never written.
  EXPECT_EQ(ReadAll(base_), original);
  EXPECT_EQ(ReadAll(ro_), ImageBytes(kImageBytes, 2));
}

TEST_F(VmDiskKvmTest, SnapshotRestoresTheDiskAsItWas) {
  auto vm = Start(Options());
  ASSERT_TRUE(vm);
  auto a = Agent(*vm);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->DiskWrite(0, 5, Sector(0x55), true).ok());
  const std::string snap = dir_ + "/snap";
  auto r = vm->control().Snapshot({snap}, 30s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(a->DiskWrite(0, 5, Sector(0x66), true).ok());  // after the snapshot
  auto opened = snapshot::SnapshotDir::Open(snap);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  // The disk index and the block devices' own records agree.
  ASSERT_EQ(opened->disks().size(), 2u);
  for (const auto& d : opened->disks()) {
    EXPECT_EQ(d.chain.layers.size(), d.read_only ? 0u : 1u);
    const auto& record = opened->state().virtio.at(d.slot);
    EXPECT_EQ(record.kind, devices::virtio::Block::kPersistKind);
    devices::virtio::MmioTransportState transport;
    std::vector<uint8_t> own;
    ASSERT_TRUE(devices::virtio::DecodeRecord(record.state, false, &transport, &own).ok());
    auto block = devices::virtio::Block::DecodeState(own, false);
    ASSERT_TRUE(block.ok()) << block.status().ToString();
    EXPECT_EQ(block->chain, d.chain);
    EXPECT_EQ(block->read_only, d.read_only);
    EXPECT_EQ(block->serial, d.serial);
  }

  for (uint64_t cid : {50, 51}) {  // two restores side by side
    VmProcessOptions o = Options();
    o.disks.clear();
    o.restore_from = snap;
    o.cid = cid;
    auto restored = Start(o);
    ASSERT_TRUE(restored);
    auto ra = Agent(*restored);
    ASSERT_TRUE(ra) << restored->VmmLog();
    EXPECT_EQ(Read(*ra, 0, 5), Sector(0x55));
    ASSERT_TRUE(ra->DiskWrite(0, 5, Sector(uint8_t(cid)), true).ok());
    EXPECT_EQ(Read(*ra, 0, 5), Sector(uint8_t(cid)));
    EXPECT_EQ(ra->DiskWrite(1, 0, Sector(1)).code(), StatusCode::kPermissionDenied);
    auto ids = ra->DiskInfo();
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(ids->size(), 2u);
    EXPECT_EQ((*ids)[0].id, "disk0");
    EXPECT_TRUE((*ids)[1].read_only);
  }
  EXPECT_EQ(Read(*a, 0, 5), Sector(0x66));

  // Without a layer directory the writable disk has nowhere to go.
  VmProcessOptions bare = Options(/*cow=*/false);
  bare.disks.clear();
  bare.restore_from = snap;
  auto refused = Start(bare);
  ASSERT_TRUE(refused);
  auto code = refused->Wait(30s);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2);
  EXPECT_NE(refused->VmmLog().find("layer"), std::string::npos) << refused->VmmLog();
}

// Every snapshot freezes a layer; flattening keeps the chain within
// LayeredDisk::kMaxLayers (16) however many snapshots are taken.
TEST_F(VmDiskKvmTest, ManySnapshotsKeepTheChainBoundedAndTheContent) {
  auto vm = Start(Options());
  ASSERT_TRUE(vm);
  auto a = Agent(*vm);
  ASSERT_TRUE(a);
  constexpr int kSnapshots = 20;
  std::string last;
  for (int i = 0; i < kSnapshots; ++i) {
    ASSERT_TRUE(a->DiskWrite(0, i, Sector(uint8_t(0x80 + i)), true).ok());
    last = dir_ + "/snap" + std::to_string(i);
    auto r = vm->control().Snapshot({last}, 30s);
    ASSERT_TRUE(r.ok()) << i << " " << r.status().ToString() << vm->VmmLog();
    if (i < kSnapshots - 1) fs::remove_all(last);  // keep the disk space small
  }
  auto opened = snapshot::SnapshotDir::Open(last);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_LE(opened->disks().at(0).chain.layers.size(), 16u);
  EXPECT_GE(opened->disks().at(0).chain.layers.size(), 1u);
  VmProcessOptions o = Options();
  o.disks.clear();
  o.restore_from = last;
  o.cid = 70;
  auto restored = Start(o);
  ASSERT_TRUE(restored);
  auto ra = Agent(*restored);
  ASSERT_TRUE(ra);
  for (int i = 0; i < kSnapshots; ++i) EXPECT_EQ(Read(*ra, 0, i), Sector(uint8_t(0x80 + i))) << i;
}

TEST_F(VmDiskKvmTest, PoolRestoreTakesALayerDir) {
  auto vm = Start(Options());
  ASSERT_TRUE(vm);
  auto a = Agent(*vm);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->DiskWrite(0, 7, Sector(0x77), true).ok());
  const std::string snap = dir_ + "/snap";
  auto r = vm->control().Snapshot({snap}, 30s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  VmProcessOptions o = Options(/*cow=*/false);
  o.disks.clear();
  o.pool = true;
  o.cid = 60;
  auto pool = Start(o);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->WaitForControl(30s).ok()) << pool->VmmLog();
  // Without a layer dir the request is refused and the pool VM stays ready.
  auto refused = pool->control().Restore({.snapshot = snap}, 30s);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status().ToString();
  EXPECT_EQ(pool->control().GetStatus(10s)->state, control::VmState::kPooled);
  auto restored = pool->control().Restore({.snapshot = snap, .layer_dir = layers()}, 30s);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString() << pool->VmmLog();
  auto pa = Agent(*pool);
  ASSERT_TRUE(pa);
  EXPECT_EQ(Read(*pa, 0, 7), Sector(0x77));
}

TEST_F(VmDiskKvmTest, RawWritableDisksAreRefusedAndOverlaysGoAtExit) {
  auto raw = Start(Options(/*cow=*/false));
  ASSERT_TRUE(raw);
  ASSERT_TRUE(Agent(*raw));
  auto r = raw->control().Snapshot({dir_ + "/no"}, 30s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--layer-dir"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ + "/no"));
  control::ForkRequest fork;
  fork.children = {{.control = dir_ + "/c.sock", .cid = 9, .vsock_uds = dir_ + "/v.sock"}};
  auto forked = raw->control().Fork(fork, 30s);
  EXPECT_FALSE(forked.ok());
  EXPECT_TRUE(Agent(*raw)->Ping().ok());  // still running

  // A copy-on-write VM's live overlay is private: removed when it stops;
  // frozen layers (referenced by snapshots and children) stay.
  auto cow = Start(Options());
  ASSERT_TRUE(cow);
  auto a = Agent(*cow);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->DiskWrite(0, 0, Sector(3), true).ok());
  r = cow->control().Snapshot({dir_ + "/s"}, 30s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto count = [&] {
    size_t n = 0;
    for (auto& e : fs::directory_iterator(layers())) n += e.path().extension() == ".layer";
    return n;
  };
  EXPECT_EQ(count(), 2u);  // frozen + live
  ASSERT_TRUE(cow->control().Shutdown(10s).ok());
  auto code = cow->Wait(30s);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(count(), 1u);
}

// A fork child has its own signal watcher: SIGTERM takes the clean path,
// which removes its private overlay.
TEST_F(VmDiskKvmTest, ForkChildStopsCleanlyOnSigterm) {
  auto parent = Start(Options());
  ASSERT_TRUE(parent);
  ASSERT_TRUE(Agent(*parent));
  VmProcess* child = ForkOne(*parent, 45);
  ASSERT_NE(child, nullptr);
  ASSERT_TRUE(Agent(*child));
  auto layers_now = [&] {
    size_t n = 0;
    for (auto& e : fs::directory_iterator(layers())) n += e.path().extension() == ".layer";
    return n;
  };
  EXPECT_EQ(layers_now(), 3u);  // the frozen layer, the parent's and the child's overlays
  ASSERT_EQ(::kill(child->pid(), SIGTERM), 0);
  for (int i = 0; i < 1000 && (layers_now() != 2 || ::kill(child->pid(), 0) == 0); ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(layers_now(), 2u);
  EXPECT_NE(::kill(child->pid(), 0), 0) << "the child is still running";
  EXPECT_TRUE(Agent(*parent)->Ping().ok());
}

}  // namespace
}  // namespace kubicle::vmm
