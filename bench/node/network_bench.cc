// kubicle-bench-network: figures for the node's per-sandbox network
// (docs/network.md). Needs root; everything it builds lives in namespaces
// of its own (a "node" namespace plays the host), so the machine's network
// is never touched. Prints, never asserts on timing:
//   slot build      a namespace with veth, tap0, forwarding and the default
//                   policy, built at Acquire (pool empty)
//   pooled take     Acquire from a full pool (the create path's cost)
//   policy apply    replacing a held slot's policy (a non-default create)
//   release         Release to torn down, on the worker (off the path)
//   create-to-ready SandboxManager over the real kubicle-vmm and test
//                   guest, with the network off and on (pooled slots)
//
//   kubicle-bench-network [--samples N]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "bench/stats.h"
#include "noderuntime/network/net_system.h"
#include "noderuntime/network/sandbox_network.h"
#include "noderuntime/manager/sandbox_manager.h"

namespace kubicle::bench {
namespace {

namespace fs = std::filesystem;
namespace net = noderuntime::network;
using namespace std::chrono_literals;

[[noreturn]] void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "kubicle-bench-network: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what, r.status());
  return std::move(r).value();
}

// A scratch directory with a namespace in it that plays the node.
class Scratch {
 public:
  Scratch() {
    char tmpl[] = "/tmp/kb-net-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) Die("mkdtemp", Status::FromErrno("mkdtemp"));
    dir_ = tmpl;
    node_ = dir_ + "/node";
    if (Status s = sys_.CreateNetns(node_); !s.ok()) Die("node namespace", s);
    if (Status s = sys_.IpBatch(node_, "link set lo up\n"); !s.ok()) Die("node namespace", s);
  }
  ~Scratch() {
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir_, ec))
      if (e.is_regular_file(ec) && e.path().parent_path().filename() == "netns") (void)sys_.DeleteNetns(e.path());
    (void)sys_.DeleteNetns(node_);
    fs::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }
  const std::string& node() const { return node_; }

 private:
  net::LinuxNetSystem sys_;
  std::string dir_, node_;
};

void WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 60000 && !done(); ++i) std::this_thread::sleep_for(1ms);
}

void SlotFigures(int samples) {
  Scratch scratch;
  net::LinuxNetSystem system(scratch.node());
  auto open = [&](size_t pool) {
    net::SandboxNetwork::Options o{.system = &system, .cidr = net::ParseCidr("10.200.0.0/16").value(),
                                   .netns_dir = scratch.dir() + "/netns", .tag = "bn", .pool_size = pool};
    auto n = Must(net::SandboxNetwork::Open(o), "open");
    if (Status s = n->Start(); !s.ok()) Die("start", s);
    return n;
  };
  std::vector<double> build, take, policy, release;
  {
    auto n = open(0);
    std::vector<uint32_t> held;
    for (int i = 0; i < samples; ++i) {
      auto t0 = Clock::now();
      held.push_back(Must(n->Acquire({}), "acquire").index);
      build.push_back(MillisSince(t0));
    }
    const net::EgressPolicy none{net::EgressMode::kNone, {}};
    for (uint32_t i : held) {
      auto t0 = Clock::now();
      if (Status s = n->ApplyPolicy(i, none); !s.ok()) Die("policy", s);
      policy.push_back(MillisSince(t0));
    }
    for (uint32_t i : held) {
      const uint64_t before = n->census().released;
      auto t0 = Clock::now();
      n->Release(i);
      WaitFor([&] { return n->census().released > before; });
      release.push_back(MillisSince(t0));
    }
    n->Stop(true);
  }
  {
    const size_t pool = 4;
    auto n = open(pool);
    for (int i = 0; i < samples; ++i) {
      WaitFor([&] { return n->census().pooled == pool; });
      auto t0 = Clock::now();
      uint32_t slot = Must(n->Acquire({}), "pooled acquire").index;
      take.push_back(MillisSince(t0));
      n->Release(slot);
    }
    n->Stop(true);
  }
  PrintPercentiles("slot build (pool empty)", build, "ms");
  PrintPercentiles("pooled take", take, "ms");
  PrintPercentiles("policy apply (nft -f, none)", policy, "ms");
  PrintPercentiles("release, off the create path", release, "ms");
}

std::vector<double> CreateToReady(bool network, int samples) {
  Scratch scratch;
  noderuntime::NodeConfig c;
  c.state_dir = scratch.dir() + "/state";
  c.vmm_binary = KUBICLE_VMM_BIN;
  c.capacity_mem_mib = 64 * 1024;
  c.capacity_vcpus = 512;
  c.pool_size_per_shape = 2;
  c.use_cgroups = false;
  c.network.enabled = network;
  c.network.pool_size = 4;
  c.network.system = std::make_shared<net::LinuxNetSystem>(scratch.node());
  auto m = Must(noderuntime::SandboxManager::Open(c, nullptr), "open manager");
  noderuntime::TemplateSpec spec;
  spec.name = "tg";
  spec.kernel = KUBICLE_TESTGUEST_ELF;
  spec.mem_mib = 64;
  Must(m->PutTemplate(spec), "put template");
  WaitFor([&] { return m->GetTemplate("tg")->state != noderuntime::TemplateState::kBaking; });
  if (m->GetTemplate("tg")->state != noderuntime::TemplateState::kReady)
    Die("bake", Status::Internal(m->GetTemplate("tg")->message));
  std::vector<double> ready;
  for (int i = 0; i < samples + 3; ++i) {
    // Between creates both pools refill, as they would between bursts.
    WaitFor([&] { return m->usage().pool_vms == 2 && (!network || m->usage().network.pooled == 4); });
    noderuntime::SandboxSpec s;
    s.template_name = "tg";
    auto sb = Must(m->CreateSandbox(s), "create");
    if (i >= 3) ready.push_back(sb.ready_ms);  // the first ones warm up
    if (Status st = m->DeleteSandbox(sb.id); !st.ok()) Die("delete", st);
  }
  m->Shutdown(true);
  return ready;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) {
  using namespace kubicle::bench;
  int samples = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--samples" && i + 1 < argc) samples = std::max(1, std::atoi(argv[++i]));
    else if (a.rfind("--samples=", 0) == 0) samples = std::max(1, std::atoi(a.c_str() + 10));
    else {
      std::fprintf(stderr, "usage: kubicle-bench-network [--samples N]\n");
      return 1;
    }
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "kubicle-bench-network: needs root (network namespaces)\n");
    return 1;
  }
  SlotFigures(samples);
  if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    std::printf("create-to-ready: skipped, /dev/kvm is absent\n");
    return 0;
  }
  PrintPercentiles("create-to-ready, network off", CreateToReady(false, samples), "ms");
  PrintPercentiles("create-to-ready, network on (pooled)", CreateToReady(true, samples), "ms");
  return 0;
}
