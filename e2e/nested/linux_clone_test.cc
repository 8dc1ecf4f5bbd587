// linux tier: snapshot, restore and fork of the real Linux guest (the python
// rootfs read-only under a tmpfs overlay, so the guest's files live in its
// RAM) under kubicle-vmm inside the nested KVM test host. Every clone must
// answer over vsock right after it resumes, keep the processes that ran at
// the snapshot or fork, run python3, take its own hostname, entropy and
// wall clock from POST_RESTORE, and see none of its siblings' writes —
// in memory (tmpfs) and on a copy-on-write disk (--layer-dir).
//
// The guest boots once per suite (booting is the slow part). Times are
// printed, never asserted: inside the nested test host they are not product
// figures. Image paths come from images.env (prepare-images.sh); missing
// images or /dev/kvm are failures, not skips: this tier must run in CI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "e2e/nested/test_watchdog.h"
#include "guest/client/agent_client.h"
#include "guest/protocol/tlv.h"
#include "noderuntime/network/guest_network.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "vmm/testing/vm_process.h"

namespace kubicle::e2e::nested {
namespace {

using namespace std::chrono_literals;
using guest::client::AgentClient;
using guest::client::DeadlineIn;
using guest::client::ExecResult;
using guest::protocol::Bytes;
using guest::protocol::ExecStartRequest;
using vmm::testing::VmProcess;
using vmm::testing::VmProcessOptions;
namespace fs = std::filesystem;

// A hang fails the test binary in minutes, with a report (test_watchdog.h).
const bool kWatchdogStarted = (StartWatchdog(std::chrono::seconds(300)), true);

constexpr int kGuestVcpus = 2;
constexpr auto kCallTimeout = 120s;
const std::string kSnapFile = "/root/snap.txt";
const std::string kSnapText = "written before the snapshot";
// Counts in the background (atomically replaced file) so a clone shows
// whether the processes of the snapshot kept running after restore.
const char kCounterScript[] =
    "import os, time\n"
    "i = 0\n"
    "while True:\n"
    "    i += 1\n"
    "    open('/root/count.tmp', 'w').write(str(i))\n"
    "    os.replace('/root/count.tmp', '/root/count')\n"
    "    time.sleep(0.2)\n";

// Same as linux_guest_test.cc's (kept local: the two binaries share nothing else).
std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::string Str(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes ToBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Makes a scratch directory's read-only files (snapshots, frozen layers)
// deletable and removes it.
void RemoveTree(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec))
    fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(dir, ec);
}

std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  return ::mkdtemp(tmpl.data()) ? tmpl : std::string();
}

struct Booted {
  std::unique_ptr<VmProcess> vm;
  std::unique_ptr<AgentClient> agent;
  double boot_to_agent_ms = 0;
};

// Boots the python guest (rootfs read-only, tmpfs overlay) with
// `extra_disks` after the rootfs and `extra_args` for kubicle-vmm.
Result<Booted> BootPythonGuest(const std::string& hostname,
                               const std::vector<std::string>& extra_disks,
                               const std::vector<std::string>& extra_args,
                               const std::string& cmdline_extra = "") {
  const auto images = ReadEnvFile(KUBICLE_LINUX_IMAGES_ENV);
  for (const char* key :
       {"KUBICLE_LINUX_KERNEL", "KUBICLE_LINUX_INITRAMFS", "KUBICLE_LINUX_ROOTFS_PYTHON"}) {
    auto it = images.find(key);
    if (it == images.end() || ::access(it->second.c_str(), R_OK) != 0) {
      return Status::FailedPrecondition(std::string(key) + " missing from " +
                                        KUBICLE_LINUX_IMAGES_ENV +
                                        ": run e2e/nested/prepare-images.sh");
    }
  }
  if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    return Status::FailedPrecondition("/dev/kvm is not usable: run this inside the nested "
                                      "test host (e2e/nested/run-in-testhost.py)");
  }
  VmProcessOptions o;
  o.vmm_binary = KUBICLE_VMM_BIN;
  o.kernel = images.at("KUBICLE_LINUX_KERNEL");
  o.mem = "512M";
  o.vcpus = kGuestVcpus;
  o.cmdline = "console=ttyS0 quiet reboot=k panic=1 i8042.noaux i8042.nomux i8042.dumbkbd "
              "kubicle.clock=" + std::to_string(std::time(nullptr)) +
              " kubicle.hostname=" + hostname + " kubicle.overlay=tmpfs" + cmdline_extra;
  o.extra_args = {"--initrd", images.at("KUBICLE_LINUX_INITRAMFS")};
  o.extra_args.insert(o.extra_args.end(), extra_args.begin(), extra_args.end());
  o.disks = {images.at("KUBICLE_LINUX_ROOTFS_PYTHON") + ",ro"};
  o.disks.insert(o.disks.end(), extra_disks.begin(), extra_disks.end());
  Booted g;
  const auto start = std::chrono::steady_clock::now();
  Progress("starting kubicle-vmm (python guest " + hostname + ")");
  ASSIGN_OR_RETURN(g.vm, VmProcess::Start(o));
  WatchVmDir(g.vm->dir());
  Progress("waiting for the agent of pid " + std::to_string(g.vm->pid()));
  auto agent = g.vm->ConnectAgent(180s);
  if (!agent.ok()) {
    return agent.status().WithContext("serial:\n" + g.vm->SerialOutput() + "\nvmm log:\n" +
                                      g.vm->VmmLog());
  }
  g.agent = std::move(*agent);
  g.boot_to_agent_ms = MsSince(start);
  Progress("guest booted");
  return g;
}

Result<ExecResult> Sh(AgentClient& agent, const std::string& command) {
  ExecStartRequest req;
  req.shell_command = command;
  return agent.Exec(req, {}, DeadlineIn(kCallTimeout));
}

// stdout of a shell command that must succeed ("" after an ADD_FAILURE).
std::string ShOut(AgentClient& agent, const std::string& command) {
  auto r = Sh(agent, command);
  if (!r.ok()) {
    ADD_FAILURE() << command << ": " << r.status().ToString();
    return "";
  }
  EXPECT_EQ(r->exit_code, 0) << command << ": " << Str(r->stderr_data);
  return Str(r->stdout_data);
}

// 16 bytes of the guest's /dev/urandom as read by python3, in hex.
std::string GuestRandom(AgentClient& agent) {
  ExecStartRequest req;
  req.argv = {"python3", "-c", "import os; print(os.urandom(16).hex())"};
  auto r = agent.Exec(req, {}, DeadlineIn(kCallTimeout));
  if (!r.ok()) {
    ADD_FAILURE() << "python3 urandom: " << r.status().ToString();
    return "";
  }
  EXPECT_EQ(r->exit_code, 0) << Str(r->stderr_data);
  EXPECT_EQ(r->stdout_data.size(), 33u) << Str(r->stdout_data);
  return Str(r->stdout_data);
}

// The clone's new identity, as the node runtime gives it: a host-drawn seed,
// the host's clock, a hostname and a generation. The reply must carry no
// warnings: as PID 1 the agent really credits the seed and forces a CRNG
// reseed (RNDADDENTROPY, RNDRESEEDCRNG), sets the clock and the hostname.
// (Distinct urandom bytes alone would not show the reseed: Linux's own
// interrupt entropy soon makes unseeded clones differ too.)
Status SendPostRestore(AgentClient& agent, const std::string& hostname, uint64_t generation,
                       const Bytes& nic_mac = {}) {
  guest::protocol::PostRestoreRequest req;
  req.nic_mac = nic_mac;
  std::random_device rd;
  for (int i = 0; i < 32; ++i) req.entropy_seed.push_back(uint8_t(rd()));
  req.wall_clock_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
  req.hostname = hostname;
  req.generation = generation;
  const uint32_t id = 50000 + uint32_t(generation);  // clear of the client's own ids
  auto frame = guest::protocol::EncodeFrame(guest::protocol::MakeFrame(req, id));
  if (!frame.ok()) return frame.status();
  auto raw = agent.RawExchange(id, *frame, DeadlineIn(kCallTimeout));
  if (!raw.ok()) return raw.status();
  if (raw->type != guest::protocol::MsgType::kPostRestore) {
    return Status::Internal("POST_RESTORE answered with message type " +
                            std::to_string(int(raw->type)));
  }
  guest::protocol::FieldReader fields(raw->payload);
  const std::string warnings =
      fields.Str(guest::protocol::Tag::kErrorMessage, 4096).value_or("");
  if (!warnings.empty()) return Status::Internal("POST_RESTORE in the guest: " + warnings);
  auto applied = guest::protocol::FieldReader(raw->payload).U64(guest::protocol::Tag::kGeneration);
  if (!applied || *applied != generation) return Status::Internal("generation not applied");
  return Status::Ok();
}

// The background counter's value (-1 when unreadable).
long ReadCounter(AgentClient& agent) {
  auto b = agent.ReadFile("/root/count", DeadlineIn(kCallTimeout));
  if (!b.ok() || b->empty()) return -1;
  return std::strtol(Str(*b).c_str(), nullptr, 10);
}

// True once the counter passes `above` (the process is alive and scheduled);
// the bound is generous: this is liveness, not speed.
bool CounterPasses(AgentClient& agent, long above) {
  const auto end = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < end) {
    if (ReadCounter(agent) > above) return true;
    std::this_thread::sleep_for(200ms);
  }
  return false;
}

// `kubicle-vmm restore` of `snap` in a new process with `cid`, then
// POST_RESTORE and one exec; prints how long each took.
Result<Booted> RestoreClone(const std::string& snap, uint64_t cid, const std::string& hostname,
                            uint64_t generation, const std::vector<std::string>& extra_args = {},
                            const Bytes& nic_mac = {}) {
  VmProcessOptions o;
  o.vmm_binary = KUBICLE_VMM_BIN;
  o.restore_from = snap;
  o.cid = cid;
  o.extra_args = extra_args;
  Progress("restore as " + hostname);
  const auto start = std::chrono::steady_clock::now();
  Booted c;
  ASSIGN_OR_RETURN(c.vm, VmProcess::Start(o));
  WatchVmDir(c.vm->dir());
  auto agent = c.vm->ConnectAgent(120s);
  if (!agent.ok()) {
    return agent.status().WithContext("vmm log:\n" + c.vm->VmmLog() + "\nserial:\n" +
                                      c.vm->SerialOutput());
  }
  c.agent = std::move(*agent);
  c.boot_to_agent_ms = MsSince(start);
  RETURN_IF_ERROR(SendPostRestore(*c.agent, hostname, generation, nic_mac));
  ASSIGN_OR_RETURN(ExecResult exec, Sh(*c.agent, "true"));
  if (exec.exit_code != 0) return Status::Internal("exec of `true` failed in the clone");
  std::printf("restore %s: to agent answering %.0f ms, to POST_RESTORE and exec done %.0f ms\n",
              hostname.c_str(), c.boot_to_agent_ms, MsSince(start));
  return c;
}

// Checks one clone right after it answered: identity, hostname, python,
// the snapshot's file and processes, the wall clock.
void ExpectCloneWorks(AgentClient& agent, const std::string& hostname, uint64_t cid,
                      long counter_at_capture) {
  SCOPED_TRACE(hostname);
  auto id = agent.Identity(DeadlineIn(kCallTimeout));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->cid, cid);
  EXPECT_EQ(id->hostname, hostname);
  EXPECT_EQ(ShOut(agent, "hostname"), hostname + "\n");
  auto file = agent.ReadFile(kSnapFile, DeadlineIn(kCallTimeout));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(Str(*file), kSnapText);
  EXPECT_TRUE(CounterPasses(agent, counter_at_capture))
      << "the background python process stopped counting at " << ReadCounter(agent);
  const std::string now = ShOut(agent, "python3 -c 'import time; print(int(time.time()))'");
  const long guest_now = std::strtol(now.c_str(), nullptr, 10);
  EXPECT_LT(std::labs(guest_now - long(std::time(nullptr))), 60) << now;
}

class LinuxCloneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto g = BootPythonGuest("py-origin", {}, {});
    if (!g.ok()) {
      boot_error_ = new std::string(g.status().ToString());
      return;
    }
    guest_ = new Booted(std::move(*g));
    std::printf("linux guest (python): boot-to-agent %.0f ms\n", guest_->boot_to_agent_ms);
    AgentClient& agent = *guest_->agent;
    Status s = agent.WriteFile(kSnapFile, ToBytes(kSnapText), {}, DeadlineIn(kCallTimeout));
    ExecStartRequest counter;
    counter.argv = {"python3", "-c", kCounterScript};
    counter.background = true;
    if (s.ok()) s = agent.Exec(counter, {}, DeadlineIn(kCallTimeout)).status();
    if (s.ok() && !CounterPasses(agent, 0)) s = Status::Internal("the counter never started");
    if (!s.ok()) boot_error_ = new std::string("guest set-up: " + s.ToString());
    scratch_ = new std::string(MakeTempDir("kubicle-linux-clone"));
  }
  static void TearDownTestSuite() {
    delete guest_;
    guest_ = nullptr;
    delete boot_error_;
    boot_error_ = nullptr;
    if (scratch_) RemoveTree(*scratch_);
    delete scratch_;
    scratch_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(boot_error_, nullptr) << *boot_error_;
    ASSERT_NE(guest_, nullptr);
    ASSERT_FALSE(scratch_->empty());
  }
  VmProcess& vm() { return *guest_->vm; }
  AgentClient& agent() { return *guest_->agent; }

  static Booted* guest_;
  static std::string* boot_error_;
  static std::string* scratch_;
};
Booted* LinuxCloneTest::guest_ = nullptr;
std::string* LinuxCloneTest::boot_error_ = nullptr;
std::string* LinuxCloneTest::scratch_ = nullptr;

// Forks `from` into `n` children with CIDs first_cid.., each with its
// sockets in a new scratch dir; returns them attached (empty on failure).
std::vector<std::unique_ptr<VmProcess>> Fork(
    VmProcess& from, int n, uint64_t first_cid,
    const std::vector<vmm::control::NetAttachment>& nets = {}) {
  vmm::control::ForkRequest request;
  std::vector<std::string> dirs;
  for (int i = 0; i < n; ++i) {
    dirs.push_back(MakeTempDir("kubicle-linux-fork"));
    EXPECT_FALSE(dirs.back().empty());
    request.children.push_back({.control = dirs.back() + "/control.sock",
                                .cid = first_cid + i,
                                .vsock_uds = dirs.back() + "/vsock.sock",
                                .serial = dirs.back() + "/serial.log"});
    if (size_t(i) < nets.size()) request.children.back().net = nets[i];
  }
  Progress(std::to_string(n) + "-way fork of pid " + std::to_string(from.pid()));
  auto r = from.control().Fork(request, kCallTimeout);
  std::vector<std::unique_ptr<VmProcess>> out;
  if (!r.ok() || r->pids.size() != size_t(n)) {
    ADD_FAILURE() << (r.ok() ? std::to_string(r->pids.size()) + " children"
                             : r.status().ToString())
                  << "\n" << from.VmmLog();
    for (auto& d : dirs) RemoveTree(d);
    return out;
  }
  std::printf("fork: %d children, parent's fork_us %lld\n", n,
              static_cast<long long>(r->fork_us));
  for (int i = 0; i < n; ++i) {
    out.push_back(VmProcess::Attach(static_cast<pid_t>(r->pids[i]), dirs[i]));
    WatchVmDir(dirs[i]);
  }
  return out;
}

// Connects to each forked child and gives it its identity; prints when each
// answered, counted from `start` (the fork request). A child writes its log
// to the stderr it inherited, the parent's log, and its own log file stays
// empty: a failure prints the parent's.
std::vector<std::unique_ptr<AgentClient>> ConnectChildren(
    const VmProcess& parent, std::vector<std::unique_ptr<VmProcess>>& children,
    const std::string& host_prefix, std::chrono::steady_clock::time_point start) {
  std::vector<std::unique_ptr<AgentClient>> agents;
  for (size_t i = 0; i < children.size(); ++i) {
    Progress("connecting to fork child " + std::to_string(i));
    auto a = children[i]->ConnectAgent(120s);
    if (!a.ok()) {
      ADD_FAILURE() << "child " << i << " (pid " << children[i]->pid()
                    << "): " << a.status().ToString()
                    << "\nparent's vmm log (the children's too):\n" << parent.VmmLog()
                    << "\nchild's serial:\n" << children[i]->SerialOutput();
      return {};
    }
    const double answer_ms = MsSince(start);
    Status post = SendPostRestore(**a, host_prefix + std::to_string(i), 100 + i);
    EXPECT_TRUE(post.ok()) << post.ToString();
    std::printf("fork child %zu: agent answering %.0f ms after the fork request, identity set "
                "%.0f ms\n", i, answer_ms, MsSince(start));
    agents.push_back(std::move(*a));
  }
  return agents;
}

// Random bytes, one per VM, must all differ.
void ExpectAllDistinct(const std::vector<std::string>& randoms) {
  std::set<std::string> distinct(randoms.begin(), randoms.end());
  EXPECT_EQ(distinct.size(), randoms.size()) << "clones read the same /dev/urandom bytes";
  EXPECT_EQ(distinct.count(""), 0u);
}

TEST_F(LinuxCloneTest, RestoresRunSideBySideWithOwnIdentityAndPrivateFiles) {
  const std::string snap = *scratch_ + "/snap";
  const long counter = ReadCounter(agent());
  ASSERT_GT(counter, 0);
  Progress("snapshot of the running python guest");
  auto start = std::chrono::steady_clock::now();
  auto r = vm().control().Snapshot({.dir = snap, .resume = true}, kCallTimeout);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << vm().VmmLog();
  std::printf("snapshot (512 MiB python guest, resume): %.0f ms\n", MsSince(start));
  ASSERT_TRUE(agent().Ping(DeadlineIn(kCallTimeout)).ok()) << "the origin stopped answering";

  std::vector<Booted> clones;
  for (int i = 0; i < 2; ++i) {
    auto clone = RestoreClone(snap, 10 + i, "py-restore-" + std::to_string(i), 1 + i);
    ASSERT_TRUE(clone.ok()) << clone.status().ToString();
    clones.push_back(std::move(*clone));
  }
  std::vector<AgentClient*> agents = {clones[0].agent.get(), clones[1].agent.get()};
  for (int i = 0; i < 2; ++i) {
    Progress("checking restore " + std::to_string(i));
    ExpectCloneWorks(*agents[i], "py-restore-" + std::to_string(i), 10 + i, counter);
  }
  Progress("urandom in the origin and both restores");
  ExpectAllDistinct({GuestRandom(agent()), GuestRandom(*agents[0]), GuestRandom(*agents[1])});

  Progress("write isolation between the restores");
  ASSERT_TRUE(agents[0]->WriteFile(kSnapFile, ToBytes("changed in restore 0"), {},
                                   DeadlineIn(kCallTimeout)).ok());
  ASSERT_EQ(ShOut(*agents[0], "echo only-0 > /root/only-0.txt && cat /root/only-0.txt"),
            "only-0\n");
  for (AgentClient* other : {agents[1], &agent()}) {
    EXPECT_EQ(ShOut(*other, "cat " + kSnapFile), kSnapText);
    EXPECT_EQ(ShOut(*other, "test -e /root/only-0.txt && echo present || echo absent"),
              "absent\n");
  }
  EXPECT_EQ(ShOut(agent(), "hostname"), "py-origin\n");
}


TEST_F(LinuxCloneTest, FiveWayForkChildrenRunPythonWithOwnIdentityAndPrivateFiles) {
  constexpr int kChildren = 5;
  const long counter = ReadCounter(agent());
  ASSERT_GT(counter, 0);
  const auto start = std::chrono::steady_clock::now();
  auto children = Fork(vm(), kChildren, 20);
  ASSERT_EQ(children.size(), size_t(kChildren));
  auto agents = ConnectChildren(vm(), children, "py-fork-", start);
  ASSERT_EQ(agents.size(), size_t(kChildren));
  std::printf("5-way fork: all children answering with their identity %.0f ms after the "
              "request\n", MsSince(start));

  ASSERT_TRUE(agent().Ping(DeadlineIn(kCallTimeout)).ok()) << "the parent stopped answering";
  auto status = vm().control().GetStatus(kCallTimeout);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, vmm::control::VmState::kRunning);
  for (int i = 0; i < kChildren; ++i) {
    Progress("checking fork child " + std::to_string(i));
    ExpectCloneWorks(*agents[i], "py-fork-" + std::to_string(i), 20 + i, counter);
  }
  EXPECT_TRUE(CounterPasses(agent(), counter)) << "the parent's background process stopped";
  EXPECT_EQ(ShOut(agent(), "hostname"), "py-origin\n");

  Progress("urandom in the parent and every child");
  std::vector<std::string> randoms = {GuestRandom(agent())};
  for (auto& a : agents) randoms.push_back(GuestRandom(*a));
  ExpectAllDistinct(randoms);

  Progress("write isolation between the forks");
  ASSERT_EQ(ShOut(*agents[1], "python3 -c \"open('/root/child1.txt','w').write('1')\" && "
                              "echo changed > " + kSnapFile + " && cat /root/child1.txt"),
            "1");
  ASSERT_EQ(ShOut(agent(), "echo p > /root/parent.txt && cat /root/parent.txt"), "p\n");
  const std::string probe =
      "for f in child1 parent; do test -e /root/$f.txt && echo $f; done; cat " + kSnapFile;
  EXPECT_EQ(ShOut(*agents[1], probe), "child1\nchanged\n");
  EXPECT_EQ(ShOut(agent(), probe), "parent\n" + kSnapText);
  for (int i : {0, 2, 3, 4}) EXPECT_EQ(ShOut(*agents[i], probe), kSnapText) << "child " << i;
}

// A writable disk under --layer-dir: the fork freezes the overlay into a
// shared layer and every VM writes its own overlay. Remounting makes the
// guest re-read the filesystem from its disk, not its page cache.
TEST(LinuxForkDiskTest, ForkedChildrensDiskWritesArePrivate) {
  const std::string scratch = MakeTempDir("kubicle-linux-fork-disk");
  ASSERT_FALSE(scratch.empty());
  struct Cleanup {
    std::string dir;
    ~Cleanup() { RemoveTree(dir); }
  } cleanup{scratch};
  const std::string image = scratch + "/data.ext4", layers = scratch + "/layers";
  ASSERT_TRUE(fs::create_directory(layers));
  ASSERT_EQ(std::system(("mke2fs -q -F -t ext4 " + image + " 64M >/dev/null").c_str()), 0);
  auto g = BootPythonGuest("py-disk", {image}, {"--layer-dir", layers});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::printf("linux guest (python, cow disk): boot-to-agent %.0f ms\n", g->boot_to_agent_ms);
  ASSERT_EQ(ShOut(*g->agent, "mkdir -p /mnt/d && mount /dev/vdb /mnt/d && echo base > "
                             "/mnt/d/base.txt && sync && cat /mnt/d/base.txt"),
            "base\n");
  const auto start = std::chrono::steady_clock::now();
  auto children = Fork(*g->vm, 2, 30);
  ASSERT_EQ(children.size(), 2u);
  auto agents = ConnectChildren(*g->vm, children, "py-disk-", start);
  ASSERT_EQ(agents.size(), 2u);

  Progress("disk writes in child 0 and the parent");
  ShOut(*agents[0], "echo c0 > /mnt/d/child0.txt && sync");
  ShOut(*g->agent, "echo p > /mnt/d/parent.txt && sync");
  const std::string reread =
      "umount /mnt/d && echo 3 > /proc/sys/vm/drop_caches && mount /dev/vdb /mnt/d && "
      "ls /mnt/d | tr '\\n' ' '";
  EXPECT_EQ(ShOut(*g->agent, reread), "base.txt lost+found parent.txt ");
  EXPECT_EQ(ShOut(*agents[0], reread), "base.txt child0.txt lost+found ");
  EXPECT_EQ(ShOut(*agents[1], reread), "base.txt lost+found ");
  // The base image itself is never written: it is still the empty filesystem.
  EXPECT_EQ(std::system(("debugfs -R 'stat /base.txt' " + image +
                         " 2>&1 | grep -q 'File not found'").c_str()),
            0);
}

// A network namespace of the test's own, standing in for the node's
// per-sandbox one (docs/network.md): tap0 at the gateway address and an
// HTTP server on it serving `dir`. `unshare -n` execs the shell, which
// execs the server, so one pid holds the namespace: its file is
// /proc/<pid>/ns/net, and killing the server ends the namespace, TAP and all.
class TestNetns {
 public:
  static Result<std::unique_ptr<TestNetns>> Start(const std::string& dir) {
    const std::string ready = dir + "/.ready";
    const std::string script =
        std::string("ip link set lo up && ip tuntap add ") + noderuntime::network::kTapName +
        " mode tap && ip addr add " + noderuntime::network::kGatewayAddress + "/" +
        std::to_string(noderuntime::network::kGuestPrefixLength) + " dev tap0 && " +
        "ip link set tap0 up && touch " + ready + " && exec python3 -m http.server " +
        std::to_string(kHttpPort) + " --bind " + noderuntime::network::kGatewayAddress +
        " >/dev/null 2>&1";
    pid_t pid = ::fork();
    if (pid < 0) return Status::FromErrno("fork");
    if (pid == 0) {
      if (::chdir(dir.c_str()) != 0) ::_exit(126);
      ::execlp("unshare", "unshare", "-n", "sh", "-c", script.c_str(), nullptr);
      ::_exit(127);
    }
    auto ns = std::unique_ptr<TestNetns>(new TestNetns(pid));
    const auto end = std::chrono::steady_clock::now() + 60s;
    while (::access(ready.c_str(), F_OK) != 0) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        ns->pid_ = -1;
        return Status::Internal("the test namespace's set-up failed (status " +
                                std::to_string(st) + "): needs ip, unshare and tun");
      }
      if (std::chrono::steady_clock::now() > end)
        return Status::DeadlineExceeded("the test namespace was not ready in 60 s");
      std::this_thread::sleep_for(50ms);
    }
    return ns;
  }
  ~TestNetns() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::string path() const { return "/proc/" + std::to_string(pid_) + "/ns/net"; }
  std::string NetFlag(const std::string& mac) const {
    return std::string("tap=") + noderuntime::network::kTapName + ",mac=" + mac +
           ",netns=" + path();
  }

  static constexpr int kHttpPort = 8000;

 private:
  explicit TestNetns(pid_t pid) : pid_(pid) {}
  pid_t pid_;
};

// python3 in the guest fetching served.txt from its gateway (retries while
// the server starts).
std::string FetchServed(AgentClient& agent) {
  const std::string url = std::string("http://") + noderuntime::network::kGatewayAddress + ":" +
                          std::to_string(TestNetns::kHttpPort) + "/served.txt";
  return ShOut(agent, "python3 -c \"\nimport time, urllib.request\nfor i in range(60):\n"
                      "    try:\n        print(urllib.request.urlopen('" + url +
                      "', timeout=10).read().decode(), end='')\n        break\n"
                      "    except OSError:\n        time.sleep(0.5)\n\"");
}

Bytes MacBytes(const std::string& text) {
  Bytes out;
  for (size_t i = 0; i < text.size(); i += 3)
    out.push_back(uint8_t(std::stoi(text.substr(i, 2), nullptr, 16)));
  return out;
}

// Each VM's TAP in a namespace of its own, the same guest address in all:
// the booted guest fetches from the server behind its TAP; a restored clone
// and a forked child, each in another namespace with a new MAC, fetch from
// theirs at once without re-addressing and carry the MAC they were given.
TEST(LinuxNetTest, EveryCloneReachesItsOwnNamespaceAtOnceWithItsNewMac) {
  const std::string scratch = MakeTempDir("kubicle-linux-net");
  ASSERT_FALSE(scratch.empty());
  struct Cleanup {
    std::string dir;
    ~Cleanup() { RemoveTree(dir); }
  } cleanup{scratch};
  std::vector<std::unique_ptr<TestNetns>> namespaces;
  for (const char* name : {"origin", "restore", "fork"}) {
    const std::string dir = scratch + "/" + name;
    ASSERT_TRUE(fs::create_directory(dir));
    std::ofstream(dir + "/served.txt") << "served to the " << name << "\n";
    auto ns = TestNetns::Start(dir);
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    namespaces.push_back(std::move(*ns));
  }
  const std::string origin_mac = "02:6b:75:00:00:01", restore_mac = "02:6b:75:00:00:02",
                    fork_mac = "02:6b:75:00:00:03";
  const std::string net_cmdline = std::string(" kubicle.net=") +
                                  noderuntime::network::kGuestAddress + "/" +
                                  std::to_string(noderuntime::network::kGuestPrefixLength) + "," +
                                  noderuntime::network::kGatewayAddress;
  auto g = BootPythonGuest("py-net", {}, {"--net", namespaces[0]->NetFlag(origin_mac)},
                           net_cmdline);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Progress("fetch from the origin's namespace");
  EXPECT_EQ(FetchServed(*g->agent), "served to the origin\n");
  EXPECT_EQ(ShOut(*g->agent, "cat /sys/class/net/eth0/address"), origin_mac + "\n");

  Progress("snapshot, then a restore into the second namespace");
  const std::string snap = scratch + "/snap";
  auto snapped = g->vm->control().Snapshot({.dir = snap, .resume = true}, kCallTimeout);
  ASSERT_TRUE(snapped.ok()) << snapped.status().ToString();
  auto clone = RestoreClone(snap, 30, "py-net-restore", 1,
                            {"--net", namespaces[1]->NetFlag(restore_mac)}, MacBytes(restore_mac));
  ASSERT_TRUE(clone.ok()) << clone.status().ToString();
  EXPECT_EQ(FetchServed(*clone->agent), "served to the restore\n");
  EXPECT_EQ(ShOut(*clone->agent, "cat /sys/class/net/eth0/address"), restore_mac + "\n");

  Progress("fork into the third namespace");
  const auto start = std::chrono::steady_clock::now();
  auto children = Fork(*g->vm, 1, 40,
                       {{noderuntime::network::kTapName, fork_mac, namespaces[2]->path()}});
  ASSERT_EQ(children.size(), 1u);
  auto agents = ConnectChildren(*g->vm, children, "py-net-fork-", start);
  ASSERT_EQ(agents.size(), 1u);
  // ConnectChildren's POST_RESTORE carries no MAC: this one does.
  ASSERT_TRUE(SendPostRestore(*agents[0], "py-net-fork-0", 150, MacBytes(fork_mac)).ok());
  EXPECT_EQ(FetchServed(*agents[0]), "served to the fork\n");
  EXPECT_EQ(ShOut(*agents[0], "cat /sys/class/net/eth0/address"), fork_mac + "\n");
  // The origin still reaches its own namespace, and only it.
  EXPECT_EQ(FetchServed(*g->agent), "served to the origin\n");
}

// Suspend and resume through the node runtime (docs/node.md, "Suspend and
// resume"): SandboxManager bakes the python guest (its root read-only under
// a tmpfs overlay, plus a writable ext4 disk under copy-on-write layers),
// starts a sandbox with a background python counter, and runs five
// suspend/resume cycles. Each cycle writes a file in RAM (tmpfs) and one on
// the disk before suspending; after each resume the counter has kept its
// count and goes on, and EVERY earlier file reads back — the disk ones
// after a remount with the page cache dropped, so from the layers
// themselves (the class of bug where files vanish after a second resume).
TEST(LinuxSuspendTest, FiveCyclesKeepTheCounterAndEveryFile) {
  const auto images = ReadEnvFile(KUBICLE_LINUX_IMAGES_ENV);
  for (const char* key : {"KUBICLE_LINUX_KERNEL", "KUBICLE_LINUX_INITRAMFS", "KUBICLE_LINUX_ROOTFS_PYTHON"})
    ASSERT_TRUE(images.count(key)) << key << " missing from " << KUBICLE_LINUX_IMAGES_ENV;
  const std::string scratch = MakeTempDir("kls");
  ASSERT_FALSE(scratch.empty());
  struct Cleanup {
    std::string dir;
    std::unique_ptr<noderuntime::SandboxManager> m;
    ~Cleanup() {
      if (m) m->Shutdown(true);
      m.reset();
      RemoveTree(dir);
    }
  } cleanup{scratch, nullptr};
  const std::string image = scratch + "/data.ext4";
  ASSERT_EQ(std::system(("mke2fs -q -F -t ext4 " + image + " 64M >/dev/null").c_str()), 0);
  noderuntime::NodeConfig config;
  config.state_dir = scratch + "/state";
  config.vmm_binary = KUBICLE_VMM_BIN;
  config.capacity_mem_mib = 4096;
  config.capacity_vcpus = 16;
  config.pool_size_per_shape = 1;
  config.use_cgroups = false;
  config.bake_boot_timeout = 240s;
  config.agent_timeout = 120s;
  auto opened = noderuntime::SandboxManager::Open(config, nullptr);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  cleanup.m = std::move(*opened);
  noderuntime::SandboxManager& m = *cleanup.m;

  noderuntime::TemplateSpec t;
  t.name = "py";
  t.kernel = images.at("KUBICLE_LINUX_KERNEL");
  t.initrd = images.at("KUBICLE_LINUX_INITRAMFS");
  t.cmdline = "console=ttyS0 quiet reboot=k panic=1 i8042.noaux i8042.nomux i8042.dumbkbd "
              "kubicle.overlay=tmpfs";
  t.disks = {images.at("KUBICLE_LINUX_ROOTFS_PYTHON") + ",ro", image};
  t.mem_mib = 512;
  t.vcpus = kGuestVcpus;
  Progress("baking the python template through the node runtime");
  ASSERT_TRUE(m.PutTemplate(t).ok());
  const auto bake_end = std::chrono::steady_clock::now() + 240s;
  auto ti = m.GetTemplate("py");
  while (ti.ok() && ti->state == noderuntime::TemplateState::kBaking &&
         std::chrono::steady_clock::now() < bake_end) {
    std::this_thread::sleep_for(200ms);
    ti = m.GetTemplate("py");
  }
  ASSERT_TRUE(ti.ok() && ti->state == noderuntime::TemplateState::kReady)
      << (ti.ok() ? ti->message : ti.status().ToString());
  noderuntime::SandboxSpec spec;
  spec.id = "susp";
  spec.template_name = "py";
  Progress("creating the sandbox");
  auto sb = m.CreateSandbox(spec);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();

  auto sh = [&](const std::string& command) {
    noderuntime::ExecOptions eo;
    eo.request.shell_command = command;
    eo.timeout = kCallTimeout;
    auto r = m.Exec("susp", eo);
    if (!r.ok()) {
      ADD_FAILURE() << command << ": " << r.status().ToString();
      return std::string();
    }
    EXPECT_EQ(r->exit_code, 0) << command << ": " << Str(r->stderr_data);
    return Str(r->stdout_data);
  };
  auto counter = [&]() -> long {
    auto b = m.ReadFile("susp", "/root/count");
    return b.ok() && !b->empty() ? std::strtol(Str(*b).c_str(), nullptr, 10) : -1;
  };
  auto counter_passes = [&](long above) {
    const auto end = std::chrono::steady_clock::now() + 120s;
    while (std::chrono::steady_clock::now() < end) {
      if (counter() > above) return true;
      std::this_thread::sleep_for(200ms);
    }
    return false;
  };
  sh("mkdir -p /mnt/d && mount /dev/vdb /mnt/d");
  noderuntime::ExecOptions bg;
  bg.request.argv = {"python3", "-c", kCounterScript};
  bg.request.background = true;
  ASSERT_TRUE(m.Exec("susp", bg).ok());
  ASSERT_TRUE(counter_passes(0)) << "the counter never started";

  for (int c = 0; c < 5; ++c) {
    SCOPED_TRACE("cycle " + std::to_string(c));
    const std::string n = std::to_string(c);
    ASSERT_TRUE(m.WriteFile("susp", "/root/ram-" + n, ToBytes("ram " + n), 0644).ok());
    sh("echo disk " + n + " > /mnt/d/disk-" + n + ".txt && sync");
    const long before = counter();
    ASSERT_GT(before, 0);
    const int pid = m.GetSandbox("susp")->vmm_pid;
    Progress("suspend " + n);
    auto t0 = std::chrono::steady_clock::now();
    auto s = m.SuspendSandbox("susp");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const double suspend_ms = MsSince(t0);
    EXPECT_EQ(s->state, noderuntime::SandboxState::kSuspended);
    EXPECT_NE(::kill(pid, 0), 0) << "the VM process outlived its suspend";
    Progress("resume " + n);
    t0 = std::chrono::steady_clock::now();
    auto r = m.ResumeSandbox("susp");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::printf("suspend/resume cycle %d (python guest, 512 MiB): suspend %.0f ms (%llu bytes on "
                "disk), resume %.0f ms\n",
                c, suspend_ms, static_cast<unsigned long long>(s->suspended_bytes), MsSince(t0));
    // The same processes: the counter went on from where it was.
    const long after = counter();
    EXPECT_GE(after, before) << "the counter restarted: a new process, not the suspended one";
    EXPECT_TRUE(counter_passes(after)) << "the background python process stopped counting at " << counter();
    for (int k = 0; k <= c; ++k) {
      const std::string kn = std::to_string(k);
      auto f = m.ReadFile("susp", "/root/ram-" + kn);
      ASSERT_TRUE(f.ok()) << "RAM file of cycle " << k << ": " << f.status().ToString();
      EXPECT_EQ(Str(*f), "ram " + kn);
    }
    std::string want;
    for (int k = 0; k <= c; ++k) want += "disk " + std::to_string(k) + "\n";
    EXPECT_EQ(sh("umount /mnt/d && echo 3 > /proc/sys/vm/drop_caches && mount /dev/vdb /mnt/d && "
                 "cat $(ls /mnt/d/disk-*.txt | sort)"),
              want);
  }
  ASSERT_TRUE(m.DeleteSandbox("susp").ok());
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(config.state_dir + "/sandboxes", ec));
}

}  // namespace
}  // namespace kubicle::e2e::nested
