#include "noderuntime/daemon/serve_flags.h"

#include <cctype>
#include <charconv>
#include <optional>
#include <set>
#include <string_view>

#include "noderuntime/network/address_plan.h"

namespace kubicle::noderuntime::daemon {

const char kServeUsage[] = R"(usage: kubicle-node serve --state-dir DIR [flags]

Runs the node daemon: bakes templates, runs sandboxes in kubicle-vmm
processes, serves the HTTP API, /metrics and /healthz (docs/node.md).
Value flags are written "--flag VALUE" or "--flag=VALUE".

  --state-dir DIR        where templates, sandboxes and sockets live (required)
  --vmm PATH             the kubicle-vmm binary (default: kubicle-vmm in the
                         directory of this binary)
  --listen HOST:PORT     API address (default 127.0.0.1:7070; port 0 picks one,
                         printed on stdout as "listening on http(s)://HOST:PORT")
  --advertise-address HOST
                         host clients use to reach the API (default: the
                         listen host, or this host's name when that is
                         0.0.0.0 or ::)
  --token-file FILE      the admin bearer token (default DIR/admin-token);
                         created with mode 0600 and a random token if absent
  --capacity-mem SIZE    guest memory the node may hand out: 20G, 512M, or
                         plain MiB (default: 3/4 of the host's RAM)
  --capacity-suspend-disk SIZE
                         node disk suspended sandboxes' memory snapshots may
                         take, as --capacity-mem (default: --capacity-mem's
                         value; docs/node.md, "Suspend and resume")
  --capacity-vcpus N     vCPUs the node may hand out (default: 16 per host
                         CPU, at least 64: idle VMs cost no CPU)
  --capacity-sandboxes N sandboxes the node may run at once, 1..100000
                         (default 500)
  --pool-size N          idle warm-pool VMs kept per template shape (default 2)
  --workspace-budget SIZE  the sum of every workspace's size on this node:
                         100G, 512M, or plain MiB (default 0: only the state
                         directory's free space; docs/workspaces.md)
  --no-cgroups           do not put VMs in per-VM cgroups
  --cgroup-root DIR      the cgroup hierarchy per-VM groups are made in
                         (default /sys/fs/cgroup); in a container, the host's
                         /sys/fs/cgroup mounted there, so that VMMs live
                         outside the container and outlive it
  --vmms-outlive-container  refuse to start unless VMMs will outlive this
                         process's container: cgroups on, --cgroup-root the
                         host's hierarchy, and not PID 1 of a PID namespace
                         of its own (hostPID); the chart sets it
  --vmm-seccomp MODE     every VM's system call filter: enforce (default; a
                         call outside it ends that VM, exit code 5), log (the
                         kernel logs such calls and they run: to find what a
                         new kernel or libc needs), off
  --stop-vms-on-exit     on SIGTERM/SIGINT delete every sandbox too (for demos
                         and CI: nothing is left running)
  --log-format FORMAT    text or json log lines on stderr (default text)
  --log-json             same as --log-format=json
  --log-level LEVEL      debug, info, warn, error (default info)
  --tls on|off           serve the API over TLS (default: on for a cluster
                         node, off standalone): the node's own CA and serving
                         certificate, made in DIR/tls at first start (clients
                         verify with DIR/tls/ca.crt, which a cluster node
                         publishes on its Lease), or the pair below; a
                         cluster node serves plain HTTP only on loopback
  --tls-cert FILE        serving certificate chain, PEM (needs --tls=on)
  --tls-key FILE         its private key, PEM (needs --tls=on)
  --insecure-http        plain HTTP, only with a loopback --listen address
  --sandbox-network on|off
                         give every sandbox its own network namespace with
                         egress policy, and its template a NIC (default on;
                         docs/network.md): needs CAP_NET_ADMIN and
                         CAP_SYS_ADMIN, ip and nft (nf_tables), and the start
                         fails when it cannot be set up; off runs sandboxes
                         without a network. The three below need it on
  --sandbox-network-cidr CIDR
                         node-local block cut into one /30 per sandbox, /8
                         to /28, overlapping no route of the host (default
                         10.200.0.0/16; nodes sharing a host need their own)
  --sandbox-nameservers IP[,IP...]
                         1..3 resolvers for the guests (default
                         1.1.1.1,8.8.8.8)
  --sandbox-network-pool N
                         namespaces kept built, 0..256 (default 4)
  --check-flags          check the flags, print "kubicle-node: flags ok" and
                         exit 0 (1 with the error when they are wrong)
  --help                 this text

Cluster node (all but --node-name need --node-name):
  --node-name NAME       join a Kubernetes cluster as this node (a DNS-1123
                         subdomain, usually the Kubernetes node's name)
  --kubeconfig FILE      cluster credentials (default: the in-cluster service
                         account, else $KUBECONFIG, else ~/.kube/config)
  --lease-namespace NS   namespace of the node's heartbeat Lease (default
                         kubicle-node-lease)
  --lease-duration-seconds N
                         the Lease expires N seconds after the last renewal,
                         10..3600 (default 40)
  --image-root DIR       absolute directory sandbox images may be read from;
                         repeatable (default /var/lib/kubicle/images)
  --image-store DIR      where container images' layers are pulled to and
                         their root filesystems built (default
                         DIR/image-store of --state-dir)
  --registry-config FILE registry credentials, docker's and kubelet's
                         config.json format (default: anonymous pulls)
  --insecure-registry HOST[:PORT]
                         pull from this registry over plain HTTP (every other
                         one over HTTPS); repeatable
  --registry-ca FILE     an extra CA (PEM) registries' certificates may chain to
  --max-image-bytes N    refuse an image whose layers add up to more than N
                         bytes, 1048576..17592186044416 (default 8589934592)
  --default-kernel FILE  guest kernel of templates that name none (the chart's
                         node image: /usr/share/kubicle/guest/vmlinux)
  --default-initrd FILE  their initramfs (needs --default-kernel)

On SIGTERM or SIGINT the daemon stops serving and exits 0, leaving sandbox
VMs running (unless --stop-vms-on-exit): the next start on the same
--state-dir re-adopts them.
Exit codes: 0 clean stop, 1 usage, 2 setup failed (state dir, listen, token,
the sandbox network).
)";

namespace {

Result<uint64_t> ParseUint(const std::string& flag, const std::string& text, uint64_t max,
                           uint64_t min = 0) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < min ||
      v > max) {
    return Status::InvalidArgument(flag + ": \"" + text + "\" is not a number in [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One DNS-1123 label: lowercase alphanumerics and '-', starting and ending
// with an alphanumeric.
bool IsDns1123Label(std::string_view s, size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  if (!IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

// Kubernetes' DNS-1123 subdomain (node names): labels joined by '.', at most
// 253 characters in all.
bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (!IsDns1123Label(label, 253)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsWildcardHost(const std::string& host) { return host == "0.0.0.0" || host == "::"; }

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Status ValidateTls(const std::set<std::string>& given, const ServeFlags& f) {
  if (given.count("--tls-cert") != given.count("--tls-key")) {
    return Status::InvalidArgument("--tls-cert and --tls-key go together");
  }
  if (!f.tls && given.count("--tls-cert")) {
    return Status::InvalidArgument("--tls-cert and --tls-key need --tls=on");
  }
  if (f.insecure_http && f.tls) {
    return Status::InvalidArgument("--insecure-http and --tls=on contradict each other");
  }
  if (f.insecure_http && !IsLoopbackHost(f.listen_host)) {
    return Status::InvalidArgument("--insecure-http serves plain HTTP only on a loopback address, "
                                   "not " + f.listen_host + " (use --tls=on)");
  }
  return Status::Ok();
}

// A hostname or an IP address: no scheme, port or path.
Status CheckAdvertiseAddress(const std::string& host) {
  if (host.empty()) return Status::InvalidArgument("--advertise-address needs a value");
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != ':') {
      return Status::InvalidArgument("--advertise-address: \"" + host +
                                     "\" is not a host name or IP address");
    }
  }
  if (IsWildcardHost(host)) {
    return Status::InvalidArgument("--advertise-address: " + host + " is not reachable by clients");
  }
  return Status::Ok();
}

// A registry as image references name it: host[:port], no scheme or path
// (so "http://reg:5000" is refused rather than never matching).
Status CheckRegistryHost(const std::string& v) {
  const std::string bad = "--insecure-registry: \"" + v + "\" is not HOST[:PORT]";
  if (v.empty() || v.size() > 255) return Status::InvalidArgument(bad);
  size_t colon = v.rfind(':');
  if (v.front() == '[') colon = v.find("]:") == std::string::npos ? std::string::npos : v.find("]:") + 1;
  const std::string host = v.substr(0, colon);
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '[' && c != ']' &&
        !(c == ':' && host.front() == '[')) {
      return Status::InvalidArgument(bad);
    }
  }
  if (host.empty()) return Status::InvalidArgument(bad);
  if (colon != std::string::npos && !ParseUint("--insecure-registry", v.substr(colon + 1), 65535, 1).ok()) {
    return Status::InvalidArgument(bad);
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> ParseMemMib(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("--capacity-mem: empty size");
  std::string digits = text;
  if (digits.size() > 1 && (digits.back() == 'i' || digits.back() == 'I')) digits.pop_back();  // "20Gi"
  uint64_t mul_kib = 1024;  // plain numbers are MiB
  char suffix = static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
  if (std::isalpha(static_cast<unsigned char>(suffix))) {
    digits.pop_back();
    switch (suffix) {
      case 'K': mul_kib = 1; break;
      case 'M': mul_kib = 1024; break;
      case 'G': mul_kib = 1024 * 1024; break;
      case 'T': mul_kib = 1024ull * 1024 * 1024; break;
      default: return Status::InvalidArgument("--capacity-mem: unknown unit in \"" + text + "\"");
    }
  }
  ASSIGN_OR_RETURN(uint64_t n, ParseUint("--capacity-mem", digits, 1ull << 40));
  uint64_t mib = n * mul_kib / 1024;
  if (mib == 0) return Status::InvalidArgument("--capacity-mem: \"" + text + "\" is under 1 MiB");
  return mib;
}

Status ParseListen(const std::string& text, std::string* host, int* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("--listen: \"" + text + "\" is not HOST:PORT");
  }
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) h = "127.0.0.1";
  auto p = ParseUint("--listen", text.substr(colon + 1), 65535);
  if (!p.ok()) return p.status();
  *host = h;
  *port = static_cast<int>(*p);
  return Status::Ok();
}

namespace {

// Flags that take no value. True when `name` is one (and is applied).
bool ApplyBoolFlag(const std::string& name, ServeFlags* f) {
  if (name == "--no-cgroups") {
    f->use_cgroups = false;
  } else if (name == "--vmms-outlive-container") {
    f->vmms_outlive_container = true;
  } else if (name == "--stop-vms-on-exit") {
    f->stop_vms_on_exit = true;
  } else if (name == "--log-json") {
    f->log_format = "json";
  } else if (name == "--check-flags") {
    f->check_flags = true;
  } else if (name == "--insecure-http") {
    f->insecure_http = true;
  } else {
    return false;
  }
  return true;
}

Result<uint32_t> ParseUint32(const std::string& flag, const std::string& v, uint64_t max,
                             uint64_t min = 0) {
  ASSIGN_OR_RETURN(uint64_t n, ParseUint(flag, v, max, min));
  return static_cast<uint32_t>(n);
}

// Flags that take a value. NotFound when `name` is not one.
Status ApplyValueFlag(const std::string& name, const std::string& v, ServeFlags* f) {
  if (name == "--state-dir") {
    f->state_dir = v;
  } else if (name == "--token-file") {
    f->token_file = v;
  } else if (name == "--vmm") {
    f->vmm = v;
  } else if (name == "--log-level") {
    f->log_level = v;
  } else if (name == "--log-format") {
    f->log_format = v;
  } else if (name == "--listen") {
    return ParseListen(v, &f->listen_host, &f->listen_port);
  } else if (name == "--advertise-address") {
    f->advertise_address = v;
  } else if (name == "--capacity-mem") {
    ASSIGN_OR_RETURN(f->capacity_mem_mib, ParseMemMib(v));
  } else if (name == "--capacity-suspend-disk") {
    auto mib = ParseMemMib(v);
    if (!mib.ok()) return Status::InvalidArgument(name + ": " + mib.status().message());
    f->capacity_suspend_disk_mib = *mib;
  } else if (name == "--capacity-vcpus") {
    ASSIGN_OR_RETURN(f->capacity_vcpus, ParseUint32(name, v, 1 << 20));
  } else if (name == "--capacity-sandboxes") {
    ASSIGN_OR_RETURN(f->capacity_sandboxes, ParseUint32(name, v, 100000, 1));
  } else if (name == "--workspace-budget") {
    if (v == "0") {
      f->workspace_budget_mib = 0;
    } else {
      ASSIGN_OR_RETURN(f->workspace_budget_mib, ParseMemMib(v));
    }
  } else if (name == "--cgroup-root") {
    if (v.empty() || v.front() != '/')
      return Status::InvalidArgument("--cgroup-root: \"" + v + "\" is not an absolute path");
    f->cgroup_root = v;
  } else if (name == "--vmm-seccomp") {
    ASSIGN_OR_RETURN(f->vmm_seccomp, vmm::ParseSeccompMode(v, name));
  } else if (name == "--pool-size") {
    ASSIGN_OR_RETURN(f->pool_size, ParseUint32(name, v, 1024));
  } else if (name == "--node-name") {
    f->node_name = v;
  } else if (name == "--kubeconfig") {
    f->kubeconfig = v;
  } else if (name == "--lease-namespace") {
    f->lease_namespace = v;
  } else if (name == "--lease-duration-seconds") {
    ASSIGN_OR_RETURN(uint32_t n, ParseUint32(name, v, 3600, 10));
    f->lease_duration_seconds = static_cast<int>(n);
  } else if (name == "--image-root") {
    f->image_roots.push_back(v);
  } else if (name == "--image-store") {
    f->image_store = v;
  } else if (name == "--registry-config") {
    f->registry_config = v;
  } else if (name == "--insecure-registry") {
    RETURN_IF_ERROR(CheckRegistryHost(v));
    f->insecure_registries.push_back(v);
  } else if (name == "--registry-ca") {
    f->registry_ca = v;
  } else if (name == "--max-image-bytes") {
    ASSIGN_OR_RETURN(f->max_image_bytes, ParseUint(name, v, 1ull << 44, 1ull << 20));
  } else if (name == "--default-kernel") {
    f->default_kernel = v;
  } else if (name == "--default-initrd") {
    f->default_initrd = v;
  } else if (name == "--tls") {
    if (v != "on" && v != "off") return Status::InvalidArgument("--tls: \"" + v + "\" is not on or off");
    f->tls = v == "on";
  } else if (name == "--sandbox-network") {
    // true/false too: it reads as a boolean, and one typed wrong must not
    // fall back to either side silently.
    if (v != "on" && v != "off" && v != "true" && v != "false")
      return Status::InvalidArgument("--sandbox-network: \"" + v + "\" is not on or off");
    f->sandbox_network = v == "on" || v == "true";
  } else if (name == "--sandbox-network-cidr") {
    auto cidr = network::ParseCidr(v);
    Status st = cidr.ok() ? network::AddressPlan::For(*cidr).status() : cidr.status();
    if (!st.ok()) return Status::InvalidArgument("--sandbox-network-cidr: " + st.message());
    f->sandbox_network_cidr = v;
  } else if (name == "--sandbox-nameservers") {
    f->sandbox_nameservers.clear();
    for (size_t p = 0; p <= v.size();) {
      const size_t comma = std::min(v.find(',', p), v.size());
      const std::string ns = v.substr(p, comma - p);
      auto ip = network::ParseIpv4(ns);
      if (!ip.ok()) return Status::InvalidArgument("--sandbox-nameservers: " + ip.status().message());
      f->sandbox_nameservers.push_back(ns);
      p = comma + 1;
    }
    if (f->sandbox_nameservers.size() > 3)
      return Status::InvalidArgument("--sandbox-nameservers: at most 3 (the guest's resolv.conf)");
  } else if (name == "--sandbox-network-pool") {
    ASSIGN_OR_RETURN(f->sandbox_network_pool, ParseUint32(name, v, 256));
  } else if (name == "--tls-cert") {
    f->tls_cert = v;
  } else if (name == "--tls-key") {
    f->tls_key = v;
  } else {
    return Status::NotFound(name);
  }
  return Status::Ok();
}

// The node-agent flags mean nothing to a standalone node.
constexpr const char* kNodeNameFlags[] = {"--kubeconfig",        "--lease-namespace", "--lease-duration-seconds",
                                          "--image-root",        "--image-store",     "--registry-config",
                                          "--insecure-registry", "--registry-ca",     "--max-image-bytes",
                                          "--default-kernel",    "--default-initrd"};

// The flags naming a file or directory of the node's own: absolute, so a
// daemon started from another directory reads the same ones.
Status ValidateImagePaths(const std::set<std::string>& given, ServeFlags* f) {
  for (const auto& [flag, path] : {std::pair{"--image-store", &f->image_store},
                                   std::pair{"--registry-config", &f->registry_config},
                                   std::pair{"--registry-ca", &f->registry_ca},
                                   std::pair{"--default-kernel", &f->default_kernel},
                                   std::pair{"--default-initrd", &f->default_initrd}}) {
    if (!path->empty() && path->front() != '/') {
      return Status::InvalidArgument(std::string(flag) + ": \"" + *path + "\" is not an absolute path");
    }
  }
  if (given.count("--default-initrd") && !given.count("--default-kernel")) {
    return Status::InvalidArgument("--default-initrd needs --default-kernel");
  }
  if (f->image_store.empty()) f->image_store = f->state_dir + "/image-store";
  return Status::Ok();
}

Status ValidateNodeAgent(const std::set<std::string>& given, ServeFlags* f) {
  if (f->node_name.empty()) {
    for (const char* flag : kNodeNameFlags) {
      if (given.count(flag)) return Status::InvalidArgument(std::string(flag) + " needs --node-name");
    }
    return Status::Ok();
  }
  if (!IsDns1123Subdomain(f->node_name)) {
    return Status::InvalidArgument("--node-name: \"" + f->node_name +
                                   "\" is not a DNS-1123 subdomain (lowercase letters, digits, "
                                   "'-' and '.', at most 253 characters)");
  }
  if (!IsDns1123Label(f->lease_namespace, 63)) {
    return Status::InvalidArgument("--lease-namespace: \"" + f->lease_namespace +
                                   "\" is not a DNS-1123 label (lowercase letters, digits and "
                                   "'-', at most 63 characters)");
  }
  for (const std::string& root : f->image_roots) {
    if (root.empty() || root.front() != '/') {
      return Status::InvalidArgument("--image-root: \"" + root + "\" is not an absolute path");
    }
  }
  if (f->image_roots.empty()) f->image_roots = {"/var/lib/kubicle/images"};
  return ValidateImagePaths(given, f);
}

Status Validate(const std::set<std::string>& given, ServeFlags* f) {
  if (f->state_dir.empty()) return Status::InvalidArgument("--state-dir is required");
  if (f->token_file.empty()) f->token_file = f->state_dir + "/admin-token";
  if (f->log_level != "debug" && f->log_level != "info" && f->log_level != "warn" &&
      f->log_level != "error") {
    return Status::InvalidArgument("--log-level: \"" + f->log_level + "\" is not debug, info, warn or error");
  }
  if (f->log_format != "text" && f->log_format != "json") {
    return Status::InvalidArgument("--log-format: \"" + f->log_format + "\" is not text or json");
  }
  f->log_json = f->log_format == "json";
  if (f->advertise_address.empty() && !IsWildcardHost(f->listen_host)) {
    f->advertise_address = f->listen_host;  // main fills in the hostname for a wildcard
  } else if (given.count("--advertise-address")) {
    RETURN_IF_ERROR(CheckAdvertiseAddress(f->advertise_address));
  }
  // A cluster node's data plane carries bearer tokens to a hostPort: TLS
  // unless said otherwise, and plain HTTP only on loopback.
  if (!f->node_name.empty() && !given.count("--tls") && !f->insecure_http) f->tls = true;
  if (!f->node_name.empty() && !f->tls && !IsLoopbackHost(f->listen_host)) {
    return Status::InvalidArgument("a cluster node (--node-name) serves its data plane over TLS: "
                                   "plain HTTP only on a loopback --listen address, not " +
                                   f->listen_host);
  }
  RETURN_IF_ERROR(ValidateTls(given, *f));
  if (!f->use_cgroups) {
    for (const char* flag : {"--cgroup-root", "--vmms-outlive-container"})
      if (given.count(flag))
        return Status::InvalidArgument(std::string(flag) + " needs cgroups (it contradicts --no-cgroups)");
  }
  if (!f->sandbox_network) {
    for (const char* flag : {"--sandbox-network-cidr", "--sandbox-nameservers", "--sandbox-network-pool"})
      if (given.count(flag))
        return Status::InvalidArgument(std::string(flag) + " means nothing with --sandbox-network=off");
  }
  return ValidateNodeAgent(given, f);
}

}  // namespace

Result<ServeFlags> ParseServeFlags(const std::vector<std::string>& args) {
  ServeFlags f;
  std::set<std::string> given;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::optional<std::string> value;
    if (size_t eq = name.find('='); name.starts_with("--") && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    given.insert(name);
    if (name == "--help" || name == "-h") {
      f.help = true;
      return f;
    }
    if (ApplyBoolFlag(name, &f)) {
      if (value) return Status::InvalidArgument(name + " takes no value");
      continue;
    }
    if (!value && i + 1 < args.size()) value = args[++i];
    Status st = ApplyValueFlag(name, value.value_or(""), &f);
    if (st.code() == StatusCode::kNotFound) {
      return Status::InvalidArgument("unknown flag \"" + name + "\"");
    }
    if (!value || value->empty()) return Status::InvalidArgument(name + " needs a value");
    RETURN_IF_ERROR(st);
  }
  RETURN_IF_ERROR(Validate(given, &f));
  return f;
}

}  // namespace kubicle::noderuntime::daemon
