// kubicle-bench-suspend: suspend and resume of a sandbox through the node
// runtime (SandboxManager, in process, real kubicle-vmm processes and the
// test guest), for 64 MiB and 512 MiB guests whose memory was filled (every
// page touched, so the snapshot writes it all). Suspend is the request to
// the snapshot durable and the VMM gone; resume the request to the agent
// answering in a pool VM restored from it. After the cycles the guest's
// memory checksum is checked (a wrong one exits 1: figures of a broken
// suspend are worthless). Prints figures; never asserts on timing.
//
//   kubicle-bench-suspend [--samples N] [--sizes 64,512]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "common/flag_args.h"
#include "guest/client/agent_client.h"
#include "noderuntime/manager/sandbox_manager.h"

namespace kubicle::bench {
namespace {

using namespace std::chrono_literals;
using noderuntime::SandboxManager;

[[noreturn]] void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "kubicle-bench-suspend: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

void Bake(SandboxManager& m, const std::string& name, uint64_t mem_mib) {
  noderuntime::TemplateSpec t;
  t.name = name;
  t.kernel = KUBICLE_TESTGUEST_ELF;
  t.mem_mib = mem_mib;
  if (auto put = m.PutTemplate(t); !put.ok()) Die("template " + name, put.status());
  for (int i = 0; i < 2400; ++i) {
    auto got = m.GetTemplate(name);
    if (!got.ok()) Die("template " + name, got.status());
    if (got->state == noderuntime::TemplateState::kReady) return;
    if (got->state == noderuntime::TemplateState::kFailed) Die("bake " + name, Status::Internal(got->message));
    std::this_thread::sleep_for(50ms);
  }
  Die("bake " + name, Status::DeadlineExceeded("not ready in 120 s"));
}

std::unique_ptr<guest::client::AgentClient> Agent(const std::string& state_dir, uint32_t cid) {
  auto a = guest::client::AgentClient::ConnectVsock(state_dir + "/sock/" + std::to_string(cid) + ".vsock",
                                                    guest::protocol::kAgentVsockPort, {},
                                                    guest::client::DeadlineIn(30s));
  if (!a.ok()) Die("agent", a.status());
  return std::move(a).value();
}

void Size(SandboxManager& m, const std::string& state_dir, uint64_t mem_mib, int samples) {
  const std::string tmpl = "tg" + std::to_string(mem_mib);
  Bake(m, tmpl, mem_mib);
  noderuntime::SandboxSpec spec;
  spec.id = "bench-" + std::to_string(mem_mib);
  spec.template_name = tmpl;
  auto sb = m.CreateSandbox(spec);
  if (!sb.ok()) Die("create", sb.status());
  // Everything from the fill area's start (2 MiB after the guest image) to
  // 8 MiB short of the end: every page of the guest touched.
  const uint64_t fill = (mem_mib - 8) << 20;
  auto agent = Agent(state_dir, sb->cid);
  auto t0 = Clock::now();
  if (Status s = agent->MemFill(42, fill, guest::client::DeadlineIn(300s)); !s.ok()) Die("mem fill", s);
  const double fill_ms = MillisSince(t0);
  agent.reset();
  std::vector<double> suspend_ms, resume_ms;
  uint64_t bytes = 0;
  for (int i = 0; i < samples; ++i) {
    t0 = Clock::now();
    auto s = m.SuspendSandbox(spec.id);
    if (!s.ok()) Die("suspend", s.status());
    suspend_ms.push_back(MillisSince(t0));
    bytes = s->suspended_bytes;
    t0 = Clock::now();
    auto r = m.ResumeSandbox(spec.id);
    if (!r.ok()) Die("resume", r.status());
    resume_ms.push_back(MillisSince(t0));
  }
  agent = Agent(state_dir, sb->cid);
  auto sum = agent->MemChecksum(guest::client::DeadlineIn(300s));
  if (!sum.ok()) Die("mem checksum", sum.status());
  if (sum->checksum != guest::protocol::ExpectedMemChecksum(42, fill))
    Die("mem checksum", Status::DataLoss("guest memory changed across suspend/resume"));
  agent.reset();
  std::printf("test guest %llu MiB, %llu MiB filled in %.0f ms; snapshot on disk %.1f MiB; "
              "memory checksum intact after %d cycles\n",
              static_cast<unsigned long long>(mem_mib), static_cast<unsigned long long>(fill >> 20), fill_ms,
              bytes / 1048576.0, samples);
  PrintPercentiles("  suspend (snapshot durable, VMM gone)", suspend_ms, "ms");
  PrintPercentiles("  resume (pool VMM restore to agent)", resume_ms, "ms");
  if (Status d = m.DeleteSandbox(spec.id); !d.ok()) Die("delete", d);
}

int Main(int argc, char** argv) {
  int samples = 10;
  std::vector<uint64_t> sizes = {64, 512};
  const std::vector<std::string> args = SplitFlagValues(argc, argv);
  for (size_t i = 0; i < args.size(); i += 2) {
    const std::string flag = i + 1 < args.size() ? args[i] : "";
    const std::string v = flag.empty() ? "" : args[i + 1];
    if (flag == "--samples") {
      samples = std::max(1, std::atoi(v.c_str()));
    } else if (flag == "--sizes") {
      sizes.clear();
      std::stringstream ss(v);
      for (std::string part; std::getline(ss, part, ',');) {
        const long mib = std::atol(part.c_str());
        if (mib < 16 || mib > 65536) {
          std::fprintf(stderr, "kubicle-bench-suspend: --sizes: %s is not 16..65536 MiB\n", part.c_str());
          return 2;
        }
        sizes.push_back(static_cast<uint64_t>(mib));
      }
    } else {
      std::fprintf(stderr, "usage: kubicle-bench-suspend [--samples N] [--sizes 64,512]\n");
      return 2;
    }
  }
  char tmpl[] = "/tmp/kubicle-bench-suspend-XXXXXX";
  if (!::mkdtemp(tmpl)) Die("mkdtemp", Status::FromErrno("mkdtemp"));
  const std::string dir = tmpl;
  noderuntime::NodeConfig c;
  c.state_dir = dir;
  c.vmm_binary = KUBICLE_VMM_BIN;
  c.capacity_mem_mib = 16 * 1024;
  c.capacity_vcpus = 64;
  c.pool_size_per_shape = 1;  // resume takes a warm pool VMM, as a create does
  c.use_cgroups = false;
  auto m = SandboxManager::Open(c, nullptr);
  if (!m.ok()) Die("open", m.status());
  std::printf("node runtime in %s (no cgroups, warm pool 1 per shape), %d suspend/resume cycles per size\n",
              dir.c_str(), samples);
  for (uint64_t mib : sizes) Size(**m, dir, mib, samples);
  (*m)->Shutdown(true);
  m->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) { return kubicle::bench::Main(argc, argv); }
