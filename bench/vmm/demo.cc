// kubicle-demo: one VM by hand, with no node and no cluster. Boots the tiny
// test guest under kubicle-vmm on this machine's KVM, shows its serial
// banner, pings its agent over virtio-vsock and prints the round trip, then
// shuts the VM down. The README's main job (the swarm on Kubernetes) is
// scripts/demo.sh.
#include <cstdio>

#include "bench/stats.h"
#include "vmm/testing/vm_process.h"

using namespace std::chrono_literals;

int main() {
  kubicle::vmm::testing::VmProcessOptions o;
  o.vmm_binary = KUBICLE_VMM_BIN;
  o.kernel = KUBICLE_TESTGUEST_ELF;
  o.vcpus = 2;
  std::printf("booting the test guest: %s --kernel %s --vcpus 2 --mem %s\n", o.vmm_binary.c_str(),
              o.kernel.c_str(), o.mem.c_str());
  auto start = kubicle::bench::Clock::now();
  auto vm = kubicle::vmm::testing::VmProcess::Start(o);
  if (!vm.ok()) return std::fprintf(stderr, "start failed: %s\n", vm.status().ToString().c_str()), 1;
  auto agent = (*vm)->ConnectAgent(60s);
  if (!agent.ok()) {
    std::fprintf(stderr, "agent did not answer: %s\nserial:\n%s\n", agent.status().ToString().c_str(),
                 (*vm)->SerialOutput().c_str());
    return 1;
  }
  double boot_ms = kubicle::bench::MillisSince(start);
  std::printf("--- guest serial console ---\n%s----------------------------\n",
              (*vm)->SerialOutput().c_str());
  auto hello = (*agent)->agent();
  std::printf("agent answered over vsock after %.1f ms: %s %s\n", boot_ms, hello.name.c_str(),
              hello.software_version.c_str());
  std::vector<double> rtt_us;
  for (int i = 0; i < 200; ++i) {
    auto t = kubicle::bench::Clock::now();
    if (!(*agent)->Ping().ok()) return std::fprintf(stderr, "ping failed\n"), 1;
    rtt_us.push_back(kubicle::bench::MillisSince(t) * 1000);
  }
  kubicle::bench::PrintPercentiles("ping round trip over vsock", rtt_us, "us");
  const kubicle::Status reply = (*vm)->control().Shutdown(10s);
  auto code = (*vm)->Wait(10s);
  if (!reply.ok()) std::fprintf(stderr, "shutdown request: %s\n", reply.ToString().c_str());
  std::printf("VM shut down, kubicle-vmm exit code %d\n", code.ok() ? *code : -1);
  return code.ok() && *code == 0 ? 0 : 1;
}
