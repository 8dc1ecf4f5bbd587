#include "bench/vmm/net_bench.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "bench/vmm/vmm_log.h"
#include "vmm/testing/test_netns.h"

namespace kubicle::bench {

namespace {

using namespace std::chrono_literals;
using vmm::control::ForkChild;
using vmm::control::ForkRequest;
using vmm::control::NetAttachment;
using vmm::control::RestoreRequest;
using vmm::testing::TestNetns;
using vmm::testing::VmProcess;
using vmm::testing::VmProcessOptions;

constexpr auto kControlTimeout = 10s;

bool Fail(const std::string& what, const Status& s, const VmProcess* vm = nullptr) {
  std::fprintf(stderr, "net: %s: %s\n%s\n", what.c_str(), s.ToString().c_str(),
               vm != nullptr ? vm->VmmLog().c_str() : "");
  return false;
}

std::string MacFor(int n) {
  char text[18];
  std::snprintf(text, sizeof(text), "02:6b:75:%02x:%02x:%02x", (n >> 16) & 0xff, (n >> 8) & 0xff,
                n & 0xff);
  return text;
}

// A booted guest (with a NIC on `ns` when given), its agent answering.
Result<std::unique_ptr<VmProcess>> BootGuest(VmProcessOptions o, const TestNetns* ns) {
  if (ns != nullptr) o.extra_args.insert(o.extra_args.end(), {"--net", ns->NetFlag(MacFor(1))});
  ASSIGN_OR_RETURN(auto vm, VmProcess::Start(o));
  RETURN_IF_ERROR(vm->ConnectAgent(60s).status());
  return vm;
}

struct RestoreTimes {
  double to_agent_ms = 0;  // restore request to agent answering
  double vmm_ms = 0;       // of which the VMM's handling of the request
};

// One warm-pool restore of `snap`: pool process up (untimed), then restore
// request to agent answering (timed).
Result<RestoreTimes> TimeRestore(const VmProcessOptions& o, const std::string& snap,
                                 uint64_t cid, std::optional<NetAttachment> net) {
  VmProcessOptions po = o;
  po.pool = true;
  po.cid = cid;
  ASSIGN_OR_RETURN(auto vm, VmProcess::Start(po));
  RETURN_IF_ERROR(vm->WaitForControl(20s));
  const auto start = Clock::now();
  RestoreRequest request{.snapshot = snap, .net = std::move(net)};
  ASSIGN_OR_RETURN(auto reply, vm->control().Restore(request, kControlTimeout));
  RETURN_IF_ERROR(vm->ConnectAgent(10s).status());
  return RestoreTimes{MillisSince(start), static_cast<double>(reply.restore_us) / 1000.0};
}

// One fork child: request to the child's agent answering, ms.
Result<double> TimeFork(VmProcess& parent, uint64_t cid, std::optional<NetAttachment> net) {
  char tmpl[] = "/tmp/kubicle-bench-netfork-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return Status::FromErrno("mkdtemp");
  const std::string dir = tmpl;
  ForkRequest request;
  request.children.push_back(ForkChild{.control = dir + "/control.sock",
                                       .cid = cid,
                                       .vsock_uds = dir + "/vsock.sock",
                                       .net = std::move(net)});
  const auto start = Clock::now();
  auto r = parent.control().Fork(request, kControlTimeout);
  if (!r.ok()) {
    std::filesystem::remove_all(dir);
    return r.status();
  }
  auto child = VmProcess::Attach(static_cast<pid_t>(r->pids.at(0)), dir);
  RETURN_IF_ERROR(child->ConnectAgent(10s).status());
  return MillisSince(start);
}

Status Snapshot(VmProcess& vm, const std::string& dir) {
  return vm.control().Snapshot({.dir = dir, .resume = false}, kControlTimeout).status();
}

void MakeWritable(const std::string& dir) {
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir, ec))
    std::filesystem::permissions(e.path(), std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add, ec);
}

}  // namespace

namespace {

// Interleaved warm-pool restores of the two snapshots, the NIC's clones
// each given namespaces[run]; prints the figures.
bool MeasureRestores(const VmProcessOptions& o, int runs, const std::string& plain_snap,
                     const std::string& nic_snap,
                     const std::vector<std::unique_ptr<TestNetns>>& namespaces) {
  std::vector<double> restore_plain, restore_nic, vmm_plain, vmm_nic;
  for (int run = 0; run < runs; ++run) {
    auto a = TimeRestore(o, plain_snap, 6000 + 2 * run, std::nullopt);
    if (!a.ok()) return Fail("restore without a NIC", a.status());
    auto b = TimeRestore(o, nic_snap, 6001 + 2 * run,
                         namespaces[run]->Attachment(MacFor(100 + run)));
    if (!b.ok()) return Fail("restore with a NIC", b.status());
    restore_plain.push_back(a->to_agent_ms);
    restore_nic.push_back(b->to_agent_ms);
    vmm_plain.push_back(a->vmm_ms);
    vmm_nic.push_back(b->vmm_ms);
  }
  PrintPercentiles("warm-pool restore to agent, no NIC", restore_plain, "ms");
  PrintPercentiles("warm-pool restore to agent, NIC in a netns", restore_nic, "ms");
  PrintPercentiles("  of which the VMM's restore, no NIC", vmm_plain, "ms");
  PrintPercentiles("  of which the VMM's restore, NIC", vmm_nic, "ms");
  return true;
}

// Interleaved forks of two running parents (one with a NIC on
// `parent_ns`), the NIC's children each given namespaces[runs + run];
// prints the figures and the children's start-up steps.
bool MeasureForks(const VmProcessOptions& o, int runs, const TestNetns& parent_ns,
                  const std::vector<std::unique_ptr<TestNetns>>& namespaces) {
  auto plain_parent = BootGuest(o, nullptr);
  if (!plain_parent.ok()) return Fail("fork parent without a NIC", plain_parent.status());
  auto nic_parent = BootGuest(o, &parent_ns);
  if (!nic_parent.ok()) return Fail("fork parent with a NIC", nic_parent.status());
  std::vector<double> fork_plain, fork_nic;
  for (int run = 0; run < runs; ++run) {
    auto a = TimeFork(**plain_parent, 6100 + 2 * run, std::nullopt);
    if (!a.ok()) return Fail("fork without a NIC", a.status(), plain_parent->get());
    auto b = TimeFork(**nic_parent, 6101 + 2 * run,
                      namespaces[runs + run]->Attachment(MacFor(200 + run)));
    if (!b.ok()) return Fail("fork with a NIC", b.status(), nic_parent->get());
    fork_plain.push_back(*a);
    fork_nic.push_back(*b);
  }
  PrintPercentiles("fork to child agent, no NIC", fork_plain, "ms");
  PrintPercentiles("fork to child agent, NIC in a netns", fork_nic, "ms");
  // Where a child's start-up goes, from its "fork child running" line: the
  // TAP is opened among the devices.
  for (const char* key : {"kvm_vm_us", "slots_us", "devices_us", "vcpus_us", "total_us"}) {
    const std::string step(key, std::strlen(key) - 3);
    PrintPercentiles("  child step " + step + ", no NIC",
                     LogField((*plain_parent)->VmmLog(), "fork child running", key), "ms");
    PrintPercentiles("  child step " + step + ", NIC",
                     LogField((*nic_parent)->VmmLog(), "fork child running", key), "ms");
  }
  return true;
}

}  // namespace

bool MeasureNet(const VmProcessOptions& o, int runs) {
  auto origin_ns = TestNetns::Create();
  if (!origin_ns.ok()) return Fail("test namespace", origin_ns.status());
  auto plain = BootGuest(o, nullptr);
  if (!plain.ok()) return Fail("boot without a NIC", plain.status());
  auto nic = BootGuest(o, origin_ns->get());
  if (!nic.ok()) return Fail("boot with a NIC", nic.status());
  const std::string plain_snap = (*plain)->dir() + "/snapshot";
  const std::string nic_snap = (*nic)->dir() + "/snapshot";
  if (Status s = Snapshot(**plain, plain_snap); !s.ok()) return Fail("snapshot", s, plain->get());
  if (Status s = Snapshot(**nic, nic_snap); !s.ok()) return Fail("snapshot", s, nic->get());

  // Every clone's namespace is made before the timed runs and kept until
  // the end, as a node would have them ready: making and tearing them down
  // between runs put RCU grace periods (netns clean-up) in the way of the
  // next KVM_CREATE_VM and memory slot. One more for the NIC's fork parent
  // (the snapshotted guests stay paused).
  std::vector<std::unique_ptr<TestNetns>> namespaces;
  for (int i = 0; i < 2 * runs + 1; ++i) {
    auto ns = TestNetns::Create();
    if (!ns.ok()) return Fail("test namespace", ns.status());
    namespaces.push_back(std::move(*ns));
  }
  const bool ok = MeasureRestores(o, runs, plain_snap, nic_snap, namespaces) &&
                  MeasureForks(o, runs, *namespaces.back(), namespaces);
  MakeWritable(plain_snap);
  MakeWritable(nic_snap);
  return ok;
}

}  // namespace kubicle::bench
