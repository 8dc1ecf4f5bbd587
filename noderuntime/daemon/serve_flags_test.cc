#include "noderuntime/daemon/serve_flags.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "noderuntime/daemon/admin_token.h"

namespace kubicle::noderuntime::daemon {
namespace {

TEST(ServeFlags, ParsesEveryFlag) {
  auto f = ParseServeFlags({"--state-dir", "/s", "--vmm", "/v", "--listen", "0.0.0.0:8080",
                            "--capacity-mem", "20G", "--capacity-vcpus", "16", "--pool-size",
                            "3", "--log-json", "--no-cgroups", "--token-file", "/t",
                            "--stop-vms-on-exit"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->listen_host, "0.0.0.0");
  EXPECT_EQ(f->listen_port, 8080);
  EXPECT_EQ(f->capacity_mem_mib, 20u * 1024);
  EXPECT_EQ(f->capacity_vcpus, 16u);
  EXPECT_EQ(f->pool_size, 3u);
  EXPECT_TRUE(f->log_json);
  EXPECT_FALSE(f->use_cgroups);
  EXPECT_TRUE(f->stop_vms_on_exit);
  EXPECT_EQ(f->token_file, "/t");
  auto d = ParseServeFlags({"--state-dir", "/s", "--vmm", "/v"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->token_file, "/s/admin-token");
  EXPECT_EQ(d->listen_port, 7070);
}

TEST(ServeFlags, CgroupRootAndVmmsOutliveContainer) {
  auto d = ParseServeFlags({"--state-dir", "/s"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->cgroup_root, "/sys/fs/cgroup");
  EXPECT_FALSE(d->vmms_outlive_container) << "host processes (development) need no host placement";
  auto pod = ParseServeFlags({"--state-dir", "/s", "--cgroup-root=/host/sys/fs/cgroup", "--vmms-outlive-container"});
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  EXPECT_EQ(pod->cgroup_root, "/host/sys/fs/cgroup");
  EXPECT_TRUE(pod->vmms_outlive_container);
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--cgroup-root=sys/fs/cgroup"},
           {"--cgroup-root="},
           {"--no-cgroups", "--vmms-outlive-container"},
           {"--no-cgroups", "--cgroup-root=/c"},
           {"--vmms-outlive-container=1"}}) {
    bad.insert(bad.begin(), "--state-dir=/s");
    EXPECT_FALSE(ParseServeFlags(bad).ok()) << bad.back();
  }
}

TEST(ServeFlags, RejectsBadInput) {
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--vmm", "/v"},
           {"--state-dir", "/s", "--vmm", "/v", "--bogus"},
           {"--state-dir", "/s", "--vmm", "/v", "--pool-size"},
           {"--state-dir", "/s", "--vmm", "/v", "--pool-size", "-1"},
           {"--state-dir", "/s", "--vmm", "/v", "--listen", "nocolon"},
           {"--state-dir", "/s", "--vmm", "/v", "--listen", "h:70000"},
           {"--state-dir", "/s", "--vmm", "/v", "--capacity-mem", "12Q"},
           {"--state-dir", "/s", "--vmm", "/v", "--log-level", "loud"}}) {
    EXPECT_FALSE(ParseServeFlags(bad).ok()) << bad.back();
  }
  EXPECT_TRUE(ParseServeFlags({"--help"})->help);
}

TEST(ServeFlags, VmmIsOptionalAndLeftForMain) {
  auto f = ParseServeFlags({"--state-dir", "/s"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->vmm, "") << "main fills in kubicle-vmm beside /proc/self/exe";
}

TEST(ServeFlags, EqualsFormForEveryValueFlag) {
  auto f = ParseServeFlags(
      {"--state-dir=/s", "--vmm=/v", "--listen=0.0.0.0:8080", "--advertise-address=10.0.0.7",
       "--token-file=/t", "--capacity-mem=2048", "--capacity-suspend-disk=10G", "--capacity-vcpus=16",
       "--capacity-sandboxes=20", "--pool-size=3", "--workspace-budget=100G", "--log-format=json",
       "--log-level=debug",
       "--node-name=kvm-node-1", "--kubeconfig=/k", "--lease-namespace=leases",
       "--lease-duration-seconds=15", "--image-root=/a", "--image-root=/b"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->state_dir, "/s");
  EXPECT_EQ(f->vmm, "/v");
  EXPECT_EQ(f->listen_host, "0.0.0.0");
  EXPECT_EQ(f->listen_port, 8080);
  EXPECT_EQ(f->advertise_address, "10.0.0.7");
  EXPECT_EQ(f->token_file, "/t");
  EXPECT_EQ(f->capacity_mem_mib, 2048u);
  EXPECT_EQ(f->capacity_suspend_disk_mib, 10u * 1024);
  EXPECT_EQ(f->capacity_vcpus, 16u);
  EXPECT_EQ(f->capacity_sandboxes, 20u);
  EXPECT_EQ(f->pool_size, 3u);
  EXPECT_EQ(f->workspace_budget_mib, 100u * 1024);
  EXPECT_EQ(f->log_format, "json");
  EXPECT_TRUE(f->log_json);
  EXPECT_EQ(f->log_level, "debug");
  EXPECT_EQ(f->node_name, "kvm-node-1");
  EXPECT_EQ(f->kubeconfig, "/k");
  EXPECT_EQ(f->lease_namespace, "leases");
  EXPECT_EQ(f->lease_duration_seconds, 15);
  EXPECT_EQ(f->image_roots, (std::vector<std::string>{"/a", "/b"}));
  // A value may itself contain '=' (only the first one splits).
  auto eq = ParseServeFlags({"--state-dir=/s=x"});
  ASSERT_TRUE(eq.ok());
  EXPECT_EQ(eq->state_dir, "/s=x");
}

TEST(ServeFlags, BoolFlagsTakeNoValue) {
  for (const char* flag : {"--no-cgroups=true", "--stop-vms-on-exit=1", "--log-json=yes",
                           "--check-flags=1"}) {
    auto f = ParseServeFlags({"--state-dir", "/s", flag});
    ASSERT_FALSE(f.ok()) << flag;
    EXPECT_NE(f.status().message().find("takes no value"), std::string::npos)
        << f.status().message();
  }
  auto f = ParseServeFlags({"--state-dir", "/s", "--check-flags"});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->check_flags);
  EXPECT_FALSE(ParseServeFlags({"--state-dir", "/s"})->check_flags);
}

TEST(ServeFlags, EmptyValuesAreRefused) {
  for (const char* flag : {"--state-dir=", "--vmm=", "--node-name=", "--image-root=",
                           "--advertise-address=", "--kubeconfig="}) {
    auto f = ParseServeFlags({"--state-dir", "/s", "--node-name", "n", flag});
    ASSERT_FALSE(f.ok()) << flag;
    EXPECT_NE(f.status().message().find("needs a value"), std::string::npos)
        << f.status().message();
  }
}

TEST(ServeFlags, AdvertiseAddress) {
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s"})->advertise_address, "127.0.0.1");
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s", "--listen", "10.1.2.3:80"})->advertise_address,
            "10.1.2.3");
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s", "--listen", "0.0.0.0:80"})->advertise_address,
            "")
      << "a wildcard listen leaves it for main (the hostname)";
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s", "--listen", "[::]:80"})->advertise_address, "");
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s", "--listen", "0.0.0.0:80", "--advertise-address",
                             "node-1.example.com"})
                ->advertise_address,
            "node-1.example.com");
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s", "--advertise-address", "fd00::7"})
                ->advertise_address,
            "fd00::7");
  for (const char* bad : {"http://h", "h/x", "0.0.0.0", "::", "a b"}) {
    EXPECT_FALSE(ParseServeFlags({"--state-dir", "/s", "--advertise-address", bad}).ok()) << bad;
  }
}

TEST(ServeFlags, CapacitySandboxes) {
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s"})->capacity_sandboxes, 500u);
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s", "--capacity-sandboxes", "1"})->capacity_sandboxes,
            1u);
  EXPECT_EQ(
      ParseServeFlags({"--state-dir", "/s", "--capacity-sandboxes", "100000"})->capacity_sandboxes,
      100000u);
  for (const char* bad : {"0", "100001", "-1", "many", ""}) {
    EXPECT_FALSE(ParseServeFlags({"--state-dir", "/s", "--capacity-sandboxes", bad}).ok()) << bad;
  }
}

TEST(ServeFlags, VmmSeccomp) {
  auto d = ParseServeFlags({"--state-dir", "/s"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->vmm_seccomp, vmm::SeccompMode::kEnforce);
  auto log = ParseServeFlags({"--state-dir", "/s", "--vmm-seccomp=log"});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(log->vmm_seccomp, vmm::SeccompMode::kLog);
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s", "--vmm-seccomp", "off"})->vmm_seccomp, vmm::SeccompMode::kOff);
  auto bad = ParseServeFlags({"--state-dir", "/s", "--vmm-seccomp", "strict"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--vmm-seccomp: 'strict' is not enforce, log or off"), std::string::npos)
      << bad.status().ToString();
}

TEST(ServeFlags, LogFormat) {
  auto d = ParseServeFlags({"--state-dir", "/s"});
  EXPECT_EQ(d->log_format, "text");
  EXPECT_FALSE(d->log_json);
  auto alias = ParseServeFlags({"--state-dir", "/s", "--log-json"});
  EXPECT_EQ(alias->log_format, "json");
  EXPECT_TRUE(alias->log_json);
  auto text = ParseServeFlags({"--state-dir", "/s", "--log-format", "text"});
  EXPECT_FALSE(text->log_json);
  auto last = ParseServeFlags({"--state-dir", "/s", "--log-json", "--log-format=text"});
  EXPECT_FALSE(last->log_json) << "the last one wins, and log_json follows log_format";
  EXPECT_FALSE(ParseServeFlags({"--state-dir", "/s", "--log-format", "xml"}).ok());
}

TEST(ServeFlags, NodeName) {
  auto standalone = ParseServeFlags({"--state-dir", "/s"});
  EXPECT_EQ(standalone->node_name, "");
  EXPECT_TRUE(standalone->image_roots.empty()) << "no image roots without a cluster";
  EXPECT_EQ(standalone->lease_namespace, "kubicle-node-lease");
  EXPECT_EQ(standalone->lease_duration_seconds, 40);
  EXPECT_EQ(standalone->kubeconfig, "");
  for (const char* ok : {"kvm-node-1", "a", "ip-10-0-0-7.ec2.internal", "0node"}) {
    auto f = ParseServeFlags({"--state-dir", "/s", "--node-name", ok});
    ASSERT_TRUE(f.ok()) << ok << ": " << f.status().ToString();
    EXPECT_EQ(f->node_name, ok);
    EXPECT_EQ(f->image_roots, (std::vector<std::string>{"/var/lib/kubicle/images"}));
  }
  std::string too_long(254, 'a');
  for (const std::string& bad : {std::string("Node1"), std::string("node_1"), std::string("-node"),
                                 std::string("node-"), std::string("a..b"), std::string(".a"),
                                 std::string("a."), too_long}) {
    auto f = ParseServeFlags({"--state-dir", "/s", "--node-name", bad});
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_NE(f.status().message().find("DNS-1123 subdomain"), std::string::npos);
  }
  EXPECT_TRUE(ParseServeFlags({"--state-dir", "/s", "--node-name", std::string(253, 'a')}).ok());
}

TEST(ServeFlags, LeaseFlags) {
  auto f = ParseServeFlags({"--state-dir", "/s", "--node-name", "n", "--lease-namespace", "kube-node-lease",
                            "--lease-duration-seconds", "3600"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->lease_namespace, "kube-node-lease");
  EXPECT_EQ(f->lease_duration_seconds, 3600);
  EXPECT_EQ(ParseServeFlags({"--state-dir", "/s", "--node-name", "n", "--lease-duration-seconds",
                             "10"})
                ->lease_duration_seconds,
            10);
  for (const char* bad : {"9", "3601", "-40", "forty"}) {
    EXPECT_FALSE(ParseServeFlags({"--state-dir", "/s", "--node-name", "n",
                                  "--lease-duration-seconds", bad})
                     .ok())
        << bad;
  }
  for (const std::string& bad : {std::string("Leases"), std::string("a.b"), std::string("-x"),
                                 std::string(64, 'a')}) {
    auto g = ParseServeFlags({"--state-dir", "/s", "--node-name", "n", "--lease-namespace", bad});
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_NE(g.status().message().find("DNS-1123 label"), std::string::npos);
  }
  EXPECT_TRUE(
      ParseServeFlags({"--state-dir", "/s", "--node-name", "n", "--lease-namespace", std::string(63, 'a')})
          .ok());
}

TEST(ServeFlags, ImageRoots) {
  auto f = ParseServeFlags({"--state-dir", "/s", "--node-name", "n", "--image-root", "/images",
                            "--image-root=/mnt/more"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->image_roots, (std::vector<std::string>{"/images", "/mnt/more"}))
      << "given roots replace the default";
  auto rel = ParseServeFlags({"--state-dir", "/s", "--node-name", "n", "--image-root", "images"});
  ASSERT_FALSE(rel.ok());
  EXPECT_NE(rel.status().message().find("not an absolute path"), std::string::npos);
}

TEST(ServeFlags, ContainerImageFlags) {
  auto d = ParseServeFlags({"--state-dir", "/s", "--node-name", "n"});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->image_store, "/s/image-store") << "under the state dir by default";
  EXPECT_TRUE(d->registry_config.empty());
  EXPECT_TRUE(d->insecure_registries.empty()) << "every registry over HTTPS unless listed";
  EXPECT_EQ(d->max_image_bytes, 8ull << 30);
  EXPECT_TRUE(d->default_kernel.empty());

  auto f = ParseServeFlags({"--state-dir", "/s", "--node-name", "n", "--image-store", "/var/img",
                            "--registry-config=/etc/kubicle/registry/config.json",
                            "--insecure-registry", "127.0.0.1:5000", "--insecure-registry=reg.local",
                            "--insecure-registry=[::1]:5001", "--registry-ca", "/etc/ca.pem",
                            "--max-image-bytes", "1048576", "--default-kernel=/g/vmlinux",
                            "--default-initrd", "/g/initramfs.cpio"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->image_store, "/var/img");
  EXPECT_EQ(f->registry_config, "/etc/kubicle/registry/config.json");
  EXPECT_EQ(f->insecure_registries, (std::vector<std::string>{"127.0.0.1:5000", "reg.local", "[::1]:5001"}));
  EXPECT_EQ(f->registry_ca, "/etc/ca.pem");
  EXPECT_EQ(f->max_image_bytes, 1048576u);
  EXPECT_EQ(f->default_kernel, "/g/vmlinux");
  EXPECT_EQ(f->default_initrd, "/g/initramfs.cpio");

  for (const auto& [bad, message] : std::vector<std::pair<std::string, std::string>>{
           {"--insecure-registry=http://reg:5000", "--insecure-registry: \"http://reg:5000\" is not HOST[:PORT]"},
           {"--insecure-registry=reg:5000/x", "--insecure-registry: \"reg:5000/x\" is not HOST[:PORT]"},
           {"--insecure-registry=reg:0", "--insecure-registry: \"reg:0\" is not HOST[:PORT]"},
           {"--insecure-registry=:5000", "--insecure-registry: \":5000\" is not HOST[:PORT]"},
           {"--max-image-bytes=1024", "--max-image-bytes: \"1024\" is not a number in [1048576, 17592186044416]"},
           {"--max-image-bytes=8G", "--max-image-bytes: \"8G\" is not a number in [1048576, 17592186044416]"},
           {"--image-store=store", "--image-store: \"store\" is not an absolute path"},
           {"--registry-config=config.json", "--registry-config: \"config.json\" is not an absolute path"},
           {"--registry-ca=ca.pem", "--registry-ca: \"ca.pem\" is not an absolute path"},
           {"--default-kernel=vmlinux", "--default-kernel: \"vmlinux\" is not an absolute path"},
           {"--default-initrd=/g/initramfs.cpio", "--default-initrd needs --default-kernel"}}) {
    auto r = ParseServeFlags({"--state-dir=/s", "--node-name=n", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), message);
  }
}

TEST(ServeFlags, ClusterFlagsNeedNodeName) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--kubeconfig", "/k"},
           {"--lease-namespace", "ns"},
           {"--lease-duration-seconds", "40"},
           {"--image-root", "/images"},
           {"--image-root=/images"},
           {"--image-store", "/i"},
           {"--registry-config", "/c.json"},
           {"--insecure-registry", "reg:5000"},
           {"--registry-ca", "/ca.pem"},
           {"--max-image-bytes", "1048576"},
           {"--default-kernel", "/k"},
           {"--default-initrd", "/i"}}) {
    std::string flag = args[0].substr(0, args[0].find('='));
    args.insert(args.begin(), {"--state-dir", "/s"});
    auto f = ParseServeFlags(args);
    ASSERT_FALSE(f.ok()) << flag;
    EXPECT_EQ(f.status().message(), flag + " needs --node-name");
  }
}

TEST(ServeFlags, SandboxNetwork) {
  auto on = ParseServeFlags({"--state-dir=/s"});
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->sandbox_network) << "on by default: isolation is what a sandbox promises";
  EXPECT_EQ(on->sandbox_network_cidr, "10.200.0.0/16");
  EXPECT_EQ(on->sandbox_nameservers, (std::vector<std::string>{"1.1.1.1", "8.8.8.8"}));
  EXPECT_EQ(on->sandbox_network_pool, 4u);
  auto set = ParseServeFlags({"--state-dir=/s", "--sandbox-network-cidr=10.77.0.0/20",
                              "--sandbox-nameservers=9.9.9.9", "--sandbox-network-pool", "0"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_TRUE(set->sandbox_network);
  EXPECT_EQ(set->sandbox_network_cidr, "10.77.0.0/20");
  EXPECT_EQ(set->sandbox_nameservers, std::vector<std::string>{"9.9.9.9"});
  EXPECT_EQ(set->sandbox_network_pool, 0u);
  EXPECT_EQ(ParseServeFlags({"--state-dir=/s", "--sandbox-nameservers=1.1.1.1,8.8.4.4,9.9.9.9", "--sandbox-network=on"})
                ->sandbox_nameservers.size(),
            3u);
  for (const char* off : {"--sandbox-network=off", "--sandbox-network=false"}) {
    auto f = ParseServeFlags({"--state-dir=/s", off});
    ASSERT_TRUE(f.ok()) << off;
    EXPECT_FALSE(f->sandbox_network) << off;
  }
  for (const char* on_flag : {"--sandbox-network=on", "--sandbox-network=true"})
    EXPECT_TRUE(ParseServeFlags({"--state-dir=/s", on_flag})->sandbox_network) << on_flag;
  auto meaningless = ParseServeFlags({"--state-dir=/s", "--sandbox-network=off", "--sandbox-network-cidr=10.77.0.0/16"});
  ASSERT_FALSE(meaningless.ok());
  EXPECT_EQ(meaningless.status().message(), "--sandbox-network-cidr means nothing with --sandbox-network=off");
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--sandbox-network=yes"},
           {"--sandbox-network=0"},
           {"--sandbox-network-cidr=10.77.0.1/16"},   // host bits
           {"--sandbox-network-cidr=10.77.0.0"},      // no length
           {"--sandbox-network-cidr=10.77.0.0/29"},   // under 4 slots
           {"--sandbox-network-cidr=10.0.0.0/7"},
           {"--sandbox-nameservers=1.1.1.1,"},
           {"--sandbox-nameservers=dns.google"},
           {"--sandbox-nameservers=1.1.1.1,1.0.0.1,8.8.8.8,8.8.4.4"},
           {"--sandbox-network-pool=257"},
           {"--sandbox-network=off", "--sandbox-network-pool=2"}}) {
    bad.insert(bad.begin(), "--state-dir=/s");
    EXPECT_FALSE(ParseServeFlags(bad).ok()) << bad.back();
  }
}

TEST(ServeFlags, UsageNamesEveryFlag) {
  for (const char* flag :
       {"--state-dir", "--vmm", "--listen", "--advertise-address", "--token-file",
        "--capacity-mem", "--capacity-suspend-disk", "--capacity-vcpus", "--capacity-sandboxes", "--pool-size",
        "--no-cgroups", "--stop-vms-on-exit", "--log-format", "--log-json", "--log-level",
        "--check-flags", "--help", "--node-name", "--kubeconfig", "--lease-namespace",
        "--lease-duration-seconds", "--image-root", "--tls", "--tls-cert", "--tls-key",
        "--insecure-http", "--sandbox-network", "--sandbox-network-cidr",
        "--sandbox-nameservers", "--sandbox-network-pool", "--vmm-seccomp", "--cgroup-root",
        "--vmms-outlive-container", "--image-store", "--registry-config", "--insecure-registry",
        "--registry-ca", "--max-image-bytes", "--default-kernel", "--default-initrd"}) {
    EXPECT_NE(std::string(kServeUsage).find(std::string("  ") + flag + " "), std::string::npos)
        << flag;
  }
}

TEST(ServeFlags, Tls) {
  auto off = ParseServeFlags({"--state-dir", "/s"});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->tls) << "standalone: off by default";
  auto on = ParseServeFlags({"--state-dir", "/s", "--tls=on", "--listen", "0.0.0.0:7443"});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->tls);
  auto given = ParseServeFlags({"--state-dir", "/s", "--tls", "on", "--tls-cert", "/c.pem",
                                "--tls-key=/k.pem"});
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->tls_cert, "/c.pem");
  EXPECT_EQ(given->tls_key, "/k.pem");
  auto loop = ParseServeFlags({"--state-dir", "/s", "--insecure-http", "--listen", "[::1]:1"});
  ASSERT_TRUE(loop.ok()) << loop.status().ToString();
  EXPECT_TRUE(loop->insecure_http);
  struct {
    std::vector<std::string> args;
    const char* needle;
  } bad[] = {
      {{"--tls=maybe"}, "on or off"},
      {{"--tls=on", "--tls-cert", "/c"}, "go together"},
      {{"--tls-cert", "/c", "--tls-key", "/k"}, "need --tls=on"},
      {{"--tls=on", "--insecure-http"}, "contradict"},
      {{"--insecure-http", "--listen", "0.0.0.0:7070"}, "loopback"},
      {{"--insecure-http=1"}, "takes no value"},
  };
  for (auto& b : bad) {
    std::vector<std::string> args = {"--state-dir", "/s"};
    args.insert(args.end(), b.args.begin(), b.args.end());
    auto f = ParseServeFlags(args);
    ASSERT_FALSE(f.ok()) << b.needle;
    EXPECT_NE(f.status().message().find(b.needle), std::string::npos) << f.status().message();
  }
}

TEST(ServeFlags, AClusterNodeServesTlsByDefault) {
  auto node = ParseServeFlags({"--state-dir", "/s", "--node-name", "n1", "--listen", "0.0.0.0:7443"});
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_TRUE(node->tls);
  auto pair = ParseServeFlags({"--state-dir", "/s", "--node-name=n1", "--tls-cert=/c", "--tls-key=/k"});
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  EXPECT_TRUE(pair->tls);
  // Plain HTTP said out loud, on loopback only.
  auto off = ParseServeFlags({"--state-dir", "/s", "--node-name=n1", "--tls=off"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->tls);
  auto insecure = ParseServeFlags({"--state-dir", "/s", "--node-name=n1", "--insecure-http"});
  ASSERT_TRUE(insecure.ok()) << insecure.status().ToString();
  EXPECT_FALSE(insecure->tls);
  for (const char* plain : {"--tls=off", "--insecure-http"}) {
    auto wide = ParseServeFlags({"--state-dir", "/s", "--node-name=n1", plain, "--listen=0.0.0.0:7443"});
    ASSERT_FALSE(wide.ok()) << plain;
    EXPECT_NE(wide.status().message().find("loopback"), std::string::npos) << wide.status().message();
  }
}

TEST(ServeFlags, MemorySizes) {
  EXPECT_EQ(*ParseMemMib("512"), 512u);
  EXPECT_EQ(*ParseMemMib("512M"), 512u);
  EXPECT_EQ(*ParseMemMib("2Gi"), 2048u);
  EXPECT_EQ(*ParseMemMib("1t"), 1024u * 1024);
  EXPECT_EQ(*ParseMemMib("2048K"), 2u);
  EXPECT_FALSE(ParseMemMib("").ok());
  EXPECT_FALSE(ParseMemMib("G").ok());
  EXPECT_FALSE(ParseMemMib("1K").ok());
  EXPECT_FALSE(ParseMemMib("-5G").ok());
}

TEST(AdminToken, CreatedOnceWithMode0600) {
  char dir[] = "/tmp/kubicle-token-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/token";
  auto t1 = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  EXPECT_EQ(t1->size(), 64u);
  struct stat sb{};
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  auto t2 = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(*t1, *t2);
  chmod(path.c_str(), 0644);
  EXPECT_FALSE(LoadOrCreateAdminToken(path).ok()) << "a world-readable token is refused";
  chmod(path.c_str(), 0600);
  std::ofstream(path) << "  \n";
  EXPECT_FALSE(LoadOrCreateAdminToken(path).ok());
  std::ofstream(path) << " mine \n";
  EXPECT_EQ(*LoadOrCreateAdminToken(path), "mine");
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace kubicle::noderuntime::daemon
