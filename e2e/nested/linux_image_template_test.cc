// linux tier of templates from container images (issue 24): an image with
// python3 (its base layer made from Debian's packages by
// image-template-test.py, plus a layer of the test's own with a script and
// a whiteout; an Env and a WorkingDir in its config) pushed to a loopback
// registry over TLS with basic auth; `kubectl apply` of a SandboxTemplate
// naming only the image; a real kubicle-node pulling it with its
// --registry-config and --registry-ca, building the ext4 root filesystem
// and baking it with the real Linux guest as its default kernel and
// initramfs (the agent comes from the initramfs, whatever the image holds);
// the real operator; python3 run in a Sandbox of it and in a fork child,
// seeing the image's Env, WorkingDir and layers; then everything deleted
// and nothing left on the node.
//
// Runs inside the nested test host, through image-template-test.py (which
// makes the base layer and sets KUBICLE_PYTHON_IMAGE_LAYER); one control
// plane per binary (e2e_env.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "e2e/e2e_env.h"
#include "e2e/registry/registry_fixture.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr char kGreeting[] = "hello-from-the-image-config";

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

size_t FilesUnder(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    n += it->is_regular_file();
  }
  return n;
}

// With the seconds since the test binary started: where a slow run spent
// its time (the test host is QEMU TCG: no figure here is a product's).
const auto kStart = std::chrono::steady_clock::now();
void Progress(const std::string& what) {
  const auto s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - kStart);
  std::cerr << "[linux-image +" << s.count() << "s] " << what << std::endl;
}

// stdout of a successful exec, else the whole reply (which then fails the
// comparison, saying what went wrong).
std::string PythonOut(kube::KubeClient* c, const std::string& ns, const std::string& sandbox,
                      const std::vector<std::string>& argv) {
  auto r = ExecInSandbox(c, ns, sandbox, argv);
  if (!r.ok()) return "exec failed: " + r.status().ToString();
  if ((*r).value("exitCode", -1) != 0) return "exit " + r->dump();
  return (*r).value("stdout", "");
}

class LinuxImageTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    KUBICLE_REQUIRE_CLUSTER();
    KUBICLE_REQUIRE_KVM();
    images = ReadEnvFile(KUBICLE_LINUX_IMAGES_ENV);
    for (const char* key : {"KUBICLE_LINUX_KERNEL", "KUBICLE_LINUX_INITRAMFS"})
      ASSERT_TRUE(images.count(key)) << key << " missing from " << KUBICLE_LINUX_IMAGES_ENV;
    const char* layer = std::getenv("KUBICLE_PYTHON_IMAGE_LAYER");
    ASSERT_TRUE(layer && fs::exists(layer)) << "KUBICLE_PYTHON_IMAGE_LAYER names no file: run "
                                               "through e2e/nested/image-template-test.py";
    python_layer = layer;
    Progress("the control plane is up");
    c = NewClient();
    ns = TestNamespace(c.get());
    work = fs::temp_directory_path() / ("linux-image-" + ns);
    fs::create_directories(work);
  }
  void TearDown() override {
    if (c && op) CleanUpNamespace(c.get(), ns);
    if (HasFailure() && node)
      std::cerr << "--- node log (tail) ---\n" << node->LogTail(12000) << "\n";
    if (op) op->Stop();
    node.reset();
    fs::remove_all(work);
  }

  // The python base layer, then the test's own: /srv/app/greet.py and a
  // whiteout of the base's /etc/debian_version.
  std::string Push(const LoopbackRegistry& reg) {
    fs::create_directories(work / "app" / "srv" / "app");
    fs::create_directories(work / "app" / "etc");
    std::ofstream(work / "app" / "srv" / "app" / "greet.py")
        << "import os, sys\n"
           "print(os.environ['GREETING'], os.getcwd(), os.path.exists('/etc/debian_version'), "
           "sys.argv[1])\n";
    std::ofstream(work / "app" / "etc" / ".wh.debian_version");
    const nlohmann::json pushed =
        PushImage(reg, {"--repo", "team/python", "--tag", "3", "--layer-tar", python_layer,
                        "--layer-dir", (work / "app").string(), "--gzip", "--env",
                        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "--env", std::string("GREETING=") + kGreeting, "--workdir", "/srv/app"});
    EXPECT_FALSE(pushed.is_discarded()) << "push_image.py failed (its stderr above)";
    return pushed.is_discarded() ? "" : pushed["manifest_digest"].get<std::string>();
  }

  std::map<std::string, std::string> images;
  std::string python_layer;
  std::unique_ptr<kube::HttpKubeClient> c;
  std::string ns;
  fs::path work;
  std::unique_ptr<NodeProcess> node;
  std::unique_ptr<OperatorProcess> op;
};

TEST_F(LinuxImageTemplate, APythonImageBakesAndRunsInASandboxAndAForkChild) {
  LoopbackRegistry reg({.tls = true, .user = "alice", .password = "s3cret"});
  if (reg.missing_package()) GTEST_SKIP() << "no docker-registry (scripts/install-deps.sh)";
  ASSERT_TRUE(reg.ok()) << reg.error();
  Progress("pushing the python image to " + reg.address());
  const std::string digest = Push(reg);
  ASSERT_FALSE(digest.empty());
  Progress("pushed " + digest);
  const fs::path config = work / "config.json";
  std::ofstream(config) << reg.docker_config();

  Progress("starting kubicle-node and the operator");
  NodeOptions o;
  o.extra_flags = {"--sandbox-network=off", "--registry-config=" + config.string(),
                   "--registry-ca=" + reg.ca_file(),
                   "--default-kernel=" + images["KUBICLE_LINUX_KERNEL"],
                   "--default-initrd=" + images["KUBICLE_LINUX_INITRAMFS"]};
  auto n = NodeProcess::Start(ns + "-a", o);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  node = std::move(*n);
  auto started = OperatorProcess::Start(ns);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  op = std::move(*started);

  // What a user writes: an image, no kernel, no rootfs.
  const std::string manifest =
      "apiVersion: kubicle.dev/v1alpha1\nkind: SandboxTemplate\nmetadata: {name: python}\n"
      "spec:\n  image: '" +
      reg.address() +
      "/team/python:3'\n  memoryMiB: 256\n"
      "  warmup: [{command: [python3, -c, 'import json']}]\n";
  auto applied = Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, manifest);
  ASSERT_TRUE(applied.ok());
  ASSERT_EQ(applied->exit_code, 0) << applied->output;
  Progress("waiting for the bake (pull, ext4 build, cold boot, warm-up, snapshot)");
  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "python", node->name(), 600s));
  auto tmpl = c->Get(kube::SandboxTemplateResource(), ns, "python");
  ASSERT_TRUE(tmpl.ok());
  const Json entry = TemplateNodeEntry(*tmpl, node->name());
  ASSERT_TRUE(entry.is_object()) << tmpl->dump();
  EXPECT_EQ(entry["imageDigest"], digest) << entry.dump();
  const std::string built =
      node->state_dir() + "/image-store/rootfs/" + digest.substr(7) + "-v1.ext4";
  auto baked = node->Admin("GET", "/v1/templates/" + entry["nodeTemplate"].get<std::string>());
  ASSERT_TRUE(baked.ok()) << baked.status().ToString();
  EXPECT_EQ((*baked)["spec"]["disks"], Json::array({built + ",ro"})) << baked->dump();
  EXPECT_EQ((*baked)["spec"]["kernel"], images["KUBICLE_LINUX_KERNEL"]);

  Progress("a Sandbox of it");
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("s1", "python")).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto s = c->Get(kube::SandboxResource(), ns, "s1");
        return s.ok() && Phase(*s) == "Running" && VmState(*s) == "Running";
      },
      300s));
  // The image's Env and WorkingDir, its python3 from Debian's packages, its
  // second layer's script and whiteout.
  EXPECT_EQ(
      PythonOut(
          c.get(), ns, "s1",
          {"python3", "-c",
           "import os, sys; print(os.environ['GREETING'], os.getcwd(), sys.version_info[0])"}),
      std::string(kGreeting) + " /srv/app 3\n");
  EXPECT_EQ(PythonOut(c.get(), ns, "s1", {"python3", "greet.py", "restored"}),
            std::string(kGreeting) + " /srv/app False restored\n");
  EXPECT_EQ(
      PythonOut(c.get(), ns, "s1",
                {"python3", "-c", "open('/tmp/state', 'w').write('written before the fork')"}),
      "");

  Progress("a fork of it");
  Json fork = {{"metadata", {{"name", "f"}}},
               {"spec", {{"sourceRef", {{"name", "s1"}}}, {"replicas", 1}}}};
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto f = c->Get(kube::SandboxForkResource(), ns, "f");
        return f.ok() && (*f).value("status", Json::object()).value("readyReplicas", 0) == 1;
      },
      300s));
  EXPECT_EQ(
      PythonOut(
          c.get(), ns, "f-0",
          {"python3", "-c",
           "import os; print(os.environ['GREETING'], os.getcwd(), open('/tmp/state').read())"}),
      std::string(kGreeting) + " /srv/app written before the fork\n");
  EXPECT_EQ(PythonOut(c.get(), ns, "f-0", {"python3", "greet.py", "forked"}),
            std::string(kGreeting) + " /srv/app False forked\n");

  Progress("deleting everything");
  ASSERT_TRUE(c->Delete(kube::SandboxForkResource(), ns, "f").ok());
  ASSERT_TRUE(Eventually([&] { return !c->Get(kube::SandboxResource(), ns, "f-0").ok(); }, 180s));
  ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "s1").ok());
  ASSERT_TRUE(Eventually([&] { return !c->Get(kube::SandboxResource(), ns, "s1").ok(); }, 180s));
  NodeLeftovers left;
  EXPECT_TRUE(Eventually([&] { return (left = node->Leftovers()).empty(); }, 60s))
      << "left on the node: " << left.ToString();
  ASSERT_TRUE(c->Delete(kube::SandboxTemplateResource(), ns, "python").ok());
  const fs::path store = node->state_dir() + "/image-store";
  EXPECT_TRUE(
      Eventually([&] { return !fs::exists(built) && FilesUnder(store / "blobs") == 0; }, 180s))
      << FilesUnder(store / "blobs") << " blobs left";
}

}  // namespace
}  // namespace kubicle::e2e
