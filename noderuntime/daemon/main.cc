// kubicle-node: the node daemon (docs/node.md). `kubicle-node serve --help`.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "common/log.h"
#include "common/stop_signals.h"
#include "noderuntime/server/api_server.h"
#include "noderuntime/server/serving_cert.h"
#include "noderuntime/daemon/admin_token.h"
#include "kube/http_kube_client.h"
#include "kube/kubeconfig.h"
#include "noderuntime/daemon/serve_flags.h"
#include "noderuntime/daemon/uninstall.h"
#include "noderuntime/node_util.h"
#include "noderuntime/nodeagent/node_agent.h"
#include "noderuntime/nodeagent/oci_rootfs.h"
#include "noderuntime/manager/sandbox_manager.h"

namespace kubicle::noderuntime::daemon {
namespace {

constexpr int kExitUsage = 1;
constexpr int kExitSetup = 2;

NodeConfig ConfigFrom(const ServeFlags& f) {
  NodeConfig c;
  c.state_dir = f.state_dir;
  c.vmm_binary = f.vmm;
  // Each state directory gets its own cgroup parent: node daemons sharing a
  // machine (tests, several nodes per host) must not sweep each other's.
  std::error_code ec;
  std::string abs = std::filesystem::weakly_canonical(f.state_dir, ec).string();
  c.cgroup_parent = "kubicle-" + Sha256Hex(ec ? f.state_dir : abs).substr(0, 12);
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page = ::sysconf(_SC_PAGE_SIZE);
  uint64_t host_mib = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page >> 20 : 4096;
  c.capacity_mem_mib = f.capacity_mem_mib ? f.capacity_mem_mib : host_mib * 3 / 4;
  c.capacity_suspend_disk_mib = f.capacity_suspend_disk_mib;
  c.workspace_budget_mib = f.workspace_budget_mib;
  unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  // Idle sandboxes cost no CPU (HLT stays in the kernel), so vCPUs are
  // over-committed by default: an agent swarm is mostly idle VMs.
  c.capacity_vcpus = f.capacity_vcpus ? f.capacity_vcpus : std::max(64u, cpus * 16);
  c.pool_size_per_shape = f.pool_size;
  c.use_cgroups = f.use_cgroups;
  c.cgroup_root = f.cgroup_root;
  c.vmm_seccomp = f.vmm_seccomp;
  c.network.enabled = f.sandbox_network;
  c.network.cidr = f.sandbox_network_cidr;
  c.network.nameservers = f.sandbox_nameservers;
  c.network.pool_size = f.sandbox_network_pool;
  return c;
}

// --kubeconfig, else the pod's service account, else $KUBECONFIG or
// ~/.kube/config (kube::LoadKubeconfig).
Result<kube::RestConfig> ClusterConfig(const ServeFlags& f) {
  if (f.kubeconfig.empty() && std::getenv("KUBERNETES_SERVICE_HOST")) return kube::InClusterConfig();
  return kube::LoadKubeconfig(f.kubeconfig);
}

// The node agent (--node-name): joins the cluster the kubeconfig names.
std::string HostName() {
  char host[256] = {};
  return ::gethostname(host, sizeof(host) - 1) == 0 ? host : "";
}

// The data plane's TLS (--tls=on): the given pair, or the node's own CA and
// serving certificate in <state-dir>/tls, made at first start and renewed
// when the names clients use change.
Result<std::optional<server::ServingTls>> SetUpTls(const ServeFlags& f) {
  if (!f.tls) return std::optional<server::ServingTls>();
  if (!f.tls_cert.empty()) {
    ASSIGN_OR_RETURN(server::ServingTls t, server::LoadTlsFiles(f.tls_cert, f.tls_key));
    return std::optional<server::ServingTls>(std::move(t));
  }
  std::vector<std::string> hosts = {f.advertise_address};
  if (f.listen_host != "0.0.0.0" && f.listen_host != "::") hosts.push_back(f.listen_host);
  for (std::string h : {std::string("localhost"), std::string("127.0.0.1"), std::string("::1"), HostName()}) {
    hosts.push_back(h);
  }
  std::vector<std::string> unique;
  for (const std::string& h : hosts) {
    if (!h.empty() && std::find(unique.begin(), unique.end(), h) == unique.end()) unique.push_back(h);
  }
  const std::string name = f.node_name.empty() ? HostName() : f.node_name;
  ASSIGN_OR_RETURN(server::ServingTls t, server::EnsureNodeTls(f.state_dir + "/tls", unique, name));
  return std::optional<server::ServingTls>(std::move(t));
}

Result<std::unique_ptr<nodeagent::NodeAgent>> StartAgent(const ServeFlags& f, const NodeConfig& node,
                                                         SandboxService* service, metrics::Registry* registry,
                                                         int port, const std::string& serving_ca) {
  ASSIGN_OR_RETURN(kube::RestConfig rest, ClusterConfig(f));
  ASSIGN_OR_RETURN(auto client, kube::HttpKubeClient::Create(rest));
  nodeagent::AgentConfig c;
  c.node_name = f.node_name;
  c.lease_namespace = f.lease_namespace;
  c.lease_duration = std::chrono::seconds(f.lease_duration_seconds);
  c.renew_interval = std::max(std::chrono::seconds(1), c.lease_duration / 4);
  // Every VM takes at least one vCPU: never advertise more Sandboxes than
  // the runtime will accept, or the operator places ones that fail "full".
  c.capacity_sandboxes = std::min<uint64_t>(f.capacity_sandboxes, node.capacity_vcpus);
  c.capacity_mem_mib = node.capacity_mem_mib;
  const bool v6 = f.advertise_address.find(':') != std::string::npos;
  c.endpoint = (v6 ? "[" + f.advertise_address + "]" : f.advertise_address) + ":" + std::to_string(port);
  c.serving_ca_pem = serving_ca;
  c.images.roots = f.image_roots;
  c.images.cache_dir = f.state_dir + "/image-cache";  // apart from the (read-only) image roots
  std::error_code ec;
  std::filesystem::create_directories(c.images.cache_dir, ec);
  if (ec) return Status::Internal("cannot create " + c.images.cache_dir + ": " + ec.message());
  // Container images (spec.image): a registry config or CA that cannot be
  // read fails the start, not every image template later.
  oci::ImageStoreOptions store;
  store.dir = f.image_store;
  store.docker_config_path = f.registry_config;
  store.insecure_registries = f.insecure_registries;
  store.ca_file = f.registry_ca;
  store.max_image_bytes = f.max_image_bytes;
  ASSIGN_OR_RETURN(c.image_rootfs, nodeagent::OpenOciRootfsCache(std::move(store)));
  c.default_kernel = f.default_kernel;
  c.default_initrd = f.default_initrd;
  return std::make_unique<nodeagent::NodeAgent>(std::move(client), service, std::move(c), registry);
}

// Whether the VMMs this node starts will outlive its container: a runtime
// stopping the container kills every process in the container's cgroup and,
// without hostPID, its whole PID namespace (docs/node.md, "VMMs across node
// restarts and rollouts"). The reason they would not, or OK.
Status CheckVmmsOutliveContainer(const ServeFlags& f, const std::string& cgroup_parent) {
  if (::getpid() == 1)
    return Status::FailedPrecondition("this node is PID 1 of a PID namespace of its own, which dies with "
                                      "it and its VMMs too: run the pod with hostPID");
  auto self = ReadFileToString("/proc/self/cgroup");
  if (!self.ok()) return self.status();
  return Cgroups(f.cgroup_root, f.use_cgroups, cgroup_parent).CheckOutsideOwnGroup(*self, ::getpid());
}

int Serve(const ServeFlags& f) {
  // Taken synchronously below; every thread started from here on inherits
  // the mask.
  const StopSignals stop_signals;
  ::signal(SIGPIPE, SIG_IGN);
  // Every API connection and VM holds descriptors; the soft limit is often
  // 1,024. The API's connection cap is half of what this leaves.
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }

  if (::access(f.vmm.c_str(), X_OK) != 0) {
    log::Error("kubicle-vmm is not executable", {{"path", f.vmm}, {"error", std::strerror(errno)}});
    return kExitSetup;
  }
  std::string host = f.listen_host;
  int port = f.listen_port;
  if (port == 0) {
    auto p = server::PickFreePort();
    if (!p.ok()) {
      log::Error("no free port", {{"error", p.status().ToString()}});
      return kExitSetup;
    }
    port = *p;
  }
  if (Status outlive = CheckVmmsOutliveContainer(f, ConfigFrom(f).cgroup_parent); !outlive.ok()) {
    if (f.vmms_outlive_container) {
      log::Error("VMMs would not outlive this node's container (--vmms-outlive-container)",
                 {{"error", outlive.message()}});
      return kExitSetup;
    }
    // Host processes (development): a note, since a stop of this process
    // alone leaves VMMs running either way.
    log::Info("VMMs would die with this process's container, if it runs in one",
              {{"reason", outlive.message()}});
  }
  metrics::Registry registry;
  auto manager = SandboxManager::Open(ConfigFrom(f), &registry);
  if (!manager.ok()) {
    log::Error("node runtime failed to start", {{"state_dir", f.state_dir},
                                                 {"error", manager.status().ToString()}});
    return kExitSetup;
  }
  // The token file usually lives in the state directory, which Open created.
  auto token = LoadOrCreateAdminToken(f.token_file);
  if (!token.ok()) {
    log::Error("admin token", {{"file", f.token_file}, {"error", token.status().ToString()}});
    (*manager)->Shutdown(false);
    return kExitSetup;
  }
  auto tls = SetUpTls(f);
  if (!tls.ok()) {
    log::Error("TLS setup failed", {{"error", tls.status().ToString()}});
    (*manager)->Shutdown(false);
    return kExitSetup;
  }
  server::ApiServerOptions api_options;
  api_options.admin_token = *token;
  if (*tls) {
    api_options.tls_cert_pem = (*tls)->cert_chain_pem;
    api_options.tls_key_pem = (*tls)->key_pem;
  }
  server::ApiServer server(manager->get(), &registry, std::move(api_options));
  Status st = server.Start(host, port);
  if (!st.ok()) {
    log::Error("API listener failed", {{"error", st.ToString()}});
    (*manager)->Shutdown(false);
    return kExitSetup;
  }
  std::unique_ptr<nodeagent::NodeAgent> agent;
  if (!f.node_name.empty()) {
    auto a = StartAgent(f, ConfigFrom(f), manager->get(), &registry, port,
                        *tls ? (*tls)->ca_pem : std::string());
    if (!a.ok()) {
      log::Error("node agent failed to start", {{"node", f.node_name}, {"error", a.status().ToString()}});
      (void)server.Stop(std::chrono::seconds(1));
      (*manager)->Shutdown(false);
      return kExitSetup;
    }
    agent = std::move(*a);
  }
  const char* scheme = *tls ? "https" : "http";
  std::printf("listening on %s://%s:%d\n", scheme, host.c_str(), port);
  std::fflush(stdout);
  log::Info("kubicle-node serving", {{"address", host + ":" + std::to_string(port)},
                                     {"scheme", scheme},
                                     {"state_dir", f.state_dir},
                                     {"token_file", f.token_file}});
  const int sig = stop_signals.Wait();
  log::Info(f.stop_vms_on_exit ? "stopping; deleting every sandbox"
                                : "stopping; sandbox VMs keep running for the next start",
            {{"signal", sig}});
  // Requests in flight (a long exec) get a grace period; the manager is
  // shut down either way, and if some still run the process exits without
  // destroying what they use.
  if (agent) agent->Stop();  // no new VMs while the runtime shuts down
  bool drained = server.Stop(std::chrono::seconds(10));
  (*manager)->Shutdown(/*stop_vms=*/f.stop_vms_on_exit);
  if (!drained) {
    log::Warn("requests still in flight after 10 s; exiting without waiting for them");
    std::fflush(nullptr);
    std::_Exit(0);
  }
  return 0;
}

constexpr char kUninstallUsage[] = R"(usage: kubicle-node uninstall [--kubeconfig FILE] [--timeout-seconds N]

Deletes every SandboxFork and Sandbox in every namespace and waits until the
nodes have torn each VM down and released each finalizer (the chart's
pre-delete hook; docs/helm.md, "Uninstall"). Workspaces and SandboxTemplates
are kept. --kubeconfig as for serve (default: the in-cluster service
account); --timeout-seconds 1..86400 (default 240); --check-flags checks
these and exits 0.
Exit codes: 0 none left, 1 usage, 2 no cluster, 3 Sandboxes left (named).
)";

int Uninstall(const std::vector<std::string>& args) {
  ServeFlags cluster;  // only its kubeconfig
  UninstallOptions options;
  bool check_flags = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name == "--help" || name == "-h") {
      std::fputs(kUninstallUsage, stdout);
      return 0;
    }
    if (name == "--check-flags") {  // the chart's test of its hook's command line
      check_flags = true;
      continue;
    }
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    }
    char* end = nullptr;
    const long n = std::strtol(value.c_str(), &end, 10);
    if (name == "--kubeconfig" && !value.empty()) {
      cluster.kubeconfig = value;
    } else if (name == "--timeout-seconds" && !value.empty() && *end == '\0' && n >= 1 && n <= 86400) {
      options.timeout = std::chrono::seconds(n);
    } else {
      std::fprintf(stderr, "kubicle-node uninstall: bad argument \"%s\"\n%s", args[i].c_str(), kUninstallUsage);
      return kExitUsage;
    }
  }
  if (check_flags) {
    std::puts("kubicle-node: flags ok");
    return 0;
  }
  log::Init("kubicle-node", false, log::ParseLevel("info"));
  auto rest = ClusterConfig(cluster);
  auto client = rest.ok() ? kube::HttpKubeClient::Create(*rest) : Result<std::unique_ptr<kube::HttpKubeClient>>(rest.status());
  if (!client.ok()) {
    log::Error("no cluster", {{"error", client.status().ToString()}});
    return kExitSetup;
  }
  options.progress = [](const std::string& line) { log::Info(line); };
  Status s = DeleteEverySandbox(**client, options);
  if (!s.ok()) {
    log::Error("uninstall: Sandboxes left", {{"error", s.ToString()}});
    return 3;
  }
  return 0;
}

// kubicle-vmm beside the running binary: the packages and the image install
// both side by side, so --vmm is only needed for unusual layouts.
Result<std::string> DefaultVmmPath() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return Status::Internal("cannot read /proc/self/exe: " + ec.message());
  return (self.parent_path() / "kubicle-vmm").string();
}

// Fills the defaults the pure parser leaves empty because they depend on
// the running process.
Status FillProcessDefaults(ServeFlags* f) {
  if (f->vmm.empty()) {
    ASSIGN_OR_RETURN(f->vmm, DefaultVmmPath());
  }
  if (f->advertise_address.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) return Status::FromErrno("gethostname");
    f->advertise_address = host;
  }
  return Status::Ok();
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kServeUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : 0;
  }
  if (args[0] == "uninstall") return Uninstall({args.begin() + 1, args.end()});
  if (args[0] != "serve") {
    std::fprintf(stderr, "kubicle-node: unknown command \"%s\" (try: kubicle-node serve --help)\n",
                 args[0].c_str());
    return kExitUsage;
  }
  auto flags = ParseServeFlags({args.begin() + 1, args.end()});
  if (!flags.ok()) {
    std::fprintf(stderr, "kubicle-node serve: %s\n(see kubicle-node serve --help)\n",
                 flags.status().message().c_str());
    return kExitUsage;
  }
  if (flags->help) {
    std::fputs(kServeUsage, stdout);
    return 0;
  }
  Status filled = FillProcessDefaults(&*flags);
  if (!filled.ok()) {
    std::fprintf(stderr, "kubicle-node serve: %s\n", filled.ToString().c_str());
    return kExitSetup;
  }
  if (flags->check_flags) {
    std::puts("kubicle-node: flags ok");
    return 0;
  }
  log::Init("kubicle-node", flags->log_format == "json", log::ParseLevel(flags->log_level));
  return Serve(*flags);
}

}  // namespace
}  // namespace kubicle::noderuntime::daemon

int main(int argc, char** argv) { return kubicle::noderuntime::daemon::Main(argc, argv); }
