// kubicle-node's command line: `kubicle-node serve --state-dir D ...`.
// Parsing is a pure function so every flag and error is unit-tested: it
// reads no files and asks the OS nothing. The few defaults that depend on
// the running process (the kubicle-vmm path, a wildcard listen address's
// advertised host) are left empty here and filled by main.cc.
// Every value flag is accepted as `--flag value` and as `--flag=value`;
// boolean flags take no value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "vmm/seccomp_mode.h"

namespace kubicle::noderuntime::daemon {

struct ServeFlags {
  std::string state_dir;
  std::string listen_host = "127.0.0.1";
  int listen_port = 7070;          // 0: pick a free port (printed on stdout)
  std::string token_file;          // created (0600, random) when absent
  // Path to kubicle-vmm. Empty when --vmm is not given: main fills in
  // kubicle-vmm beside the running binary (/proc/self/exe).
  std::string vmm;
  // Host clients use to reach the data plane. Default: the listen host;
  // empty when that is a wildcard (0.0.0.0, ::), and main uses the hostname.
  std::string advertise_address;
  uint64_t capacity_mem_mib = 0;   // 0: 3/4 of the host's RAM
  uint64_t capacity_suspend_disk_mib = 0;  // 0: capacity_mem_mib
  uint32_t capacity_vcpus = 0;     // 0: 16 per host CPU, at least 64
  uint32_t capacity_sandboxes = 500;  // 1..100000
  uint32_t pool_size = 2;
  uint64_t workspace_budget_mib = 0;  // 0: only the disk's free space
  bool use_cgroups = true;
  // Where per-VM cgroups are made: the host's cgroup hierarchy (in a pod,
  // the host's /sys/fs/cgroup mounted into it; docs/node.md, "VMMs across
  // node restarts and rollouts"). An absolute path.
  std::string cgroup_root = "/sys/fs/cgroup";
  // --vmms-outlive-container: refuse to start unless every VMM will live
  // outside this process's container (cgroups on, --cgroup-root the host's
  // hierarchy, not PID 1 of a PID namespace of its own). The chart sets it;
  // host processes (development) need not.
  bool vmms_outlive_container = false;
  // --vmm-seccomp: every VMM's --seccomp (docs/vmm.md, "Seccomp").
  vmm::SeccompMode vmm_seccomp = vmm::SeccompMode::kEnforce;
  bool stop_vms_on_exit = false;   // SIGTERM deletes every sandbox (demos, CI)
  std::string log_format = "text";  // "text" or "json"
  bool log_json = false;           // always log_format == "json" (--log-json is an alias)
  std::string log_level = "info";
  // The data plane's TLS (docs/node.md, "TLS"): the node's own CA and
  // serving certificate in <state-dir>/tls, or the --tls-cert/--tls-key
  // pair. On by default for a cluster node (--node-name), which serves plain
  // HTTP (--tls=off, --insecure-http) only on a loopback listen; off by
  // default standalone.
  bool tls = false;
  std::string tls_cert;
  std::string tls_key;
  // --insecure-http: plain HTTP said out loud; only on a loopback listen.
  bool insecure_http = false;
  // Cluster membership (node agent). Set: the node joins a cluster under this
  // name, a DNS-1123 subdomain. The flags below need it.
  std::string node_name;
  // Empty: in-cluster service account, else $KUBECONFIG, else ~/.kube/config
  // (resolved by the node agent, not by the parser).
  std::string kubeconfig;
  std::string lease_namespace = "kubicle-node-lease";  // a DNS-1123 label
  int lease_duration_seconds = 40;                     // 10..3600
  // Absolute directories images are read from (--image-root, repeatable).
  // None given and node_name set: {"/var/lib/kubicle/images"}.
  std::vector<std::string> image_roots;
  // Templates from container images (spec.image; docs/node.md, "Templates
  // from container images"). All absolute paths; need --node-name.
  // --image-store: pulled layers and built root filesystems. Default
  // <state-dir>/image-store.
  std::string image_store;
  // --registry-config: credentials in docker's and kubelet's config.json
  // format (the chart mounts it from a Secret). Empty: anonymous pulls.
  std::string registry_config;
  // --insecure-registry, repeatable: host[:port] pulled over plain HTTP;
  // every other registry over HTTPS.
  std::vector<std::string> insecure_registries;
  std::string registry_ca;  // --registry-ca: an extra trusted CA (PEM)
  // --max-image-bytes: an image whose layers add up to more is refused
  // before any layer is fetched; its root filesystem is bounded likewise.
  uint64_t max_image_bytes = 8ull << 30;
  // --default-kernel/--default-initrd: the guest kernel (and initramfs) of
  // templates that name no kernel. Empty: such templates fail on this node.
  std::string default_kernel;
  std::string default_initrd;
  // One network namespace per sandbox (docs/network.md). On by default:
  // isolation is what a sandbox promises. A node that cannot set it up
  // fails at start; --sandbox-network=off is the only way to run without.
  // Nodes sharing a host need distinct CIDRs.
  bool sandbox_network = true;
  std::string sandbox_network_cidr = "10.200.0.0/16";
  std::vector<std::string> sandbox_nameservers = {"1.1.1.1", "8.8.8.8"};
  uint32_t sandbox_network_pool = 4;
  bool check_flags = false;  // parse, validate, print "kubicle-node: flags ok", exit 0
  bool help = false;
};

// Parses the arguments after "serve". InvalidArgument names the bad flag.
Result<ServeFlags> ParseServeFlags(const std::vector<std::string>& args);
// "20G", "512M", "1T", "1048576K" or plain MiB ("512") to MiB.
Result<uint64_t> ParseMemMib(const std::string& text);
// "127.0.0.1:7070", ":7070" (127.0.0.1) or "[::1]:7070".
Status ParseListen(const std::string& text, std::string* host, int* port);

extern const char kServeUsage[];

}  // namespace kubicle::noderuntime::daemon
