// e2e of templates from container images (issue 24): a real registry on
// loopback (Debian's docker-registry, e2e/registry/), an image pushed to it,
// `kubectl apply` of a SandboxTemplate naming it, a real kubicle-node that
// pulls it over plain HTTP (--insecure-registry), builds the ext4 root
// filesystem and bakes it with its default guest kernel (the test guest,
// which ignores the disk: the node's records show it attached), the real
// operator, a Sandbox from it and a fork of that running commands; then the
// template removed and the node collecting its image. And a private
// registry over TLS with basic auth (--registry-config, --registry-ca), a
// moved tag baked at the next generation, an image over --max-image-bytes
// refused. Skips without the control plane, KVM or docker-registry.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "e2e/e2e_env.h"
#include "e2e/registry/registry_fixture.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// ext4's superblock magic (0xEF53, little-endian, 1080 bytes in).
bool IsExt4(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[2] = {};
  f.seekg(1080);
  f.read(magic, 2);
  return f && static_cast<unsigned char>(magic[0]) == 0x53 && static_cast<unsigned char>(magic[1]) == 0xEF;
}

size_t FilesUnder(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    n += it->is_regular_file();
  }
  return n;
}

class ImageTemplateE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    KUBICLE_REQUIRE_CLUSTER();
    KUBICLE_REQUIRE_KVM();
    c = NewClient();
    ns = TestNamespace(c.get());
    ASSERT_TRUE(WriteTestGuestImages(ImageRoot()).ok());
  }
  void TearDown() override {
    if (c && op) CleanUpNamespace(c.get(), ns);
    if (HasFailure() && node) std::cerr << "--- node log (tail) ---\n" << node->LogTail() << "\n";
    if (op) op->Stop();
    node.reset();
    for (const fs::path& p : cleanup) fs::remove_all(p);
  }

  // A registry on loopback (skips the test without docker-registry).
  std::unique_ptr<LoopbackRegistry> Registry(const LoopbackRegistryOptions& o) {
    auto reg = std::make_unique<LoopbackRegistry>(o);
    if (reg->missing_package()) return nullptr;
    EXPECT_TRUE(reg->ok()) << reg->error();
    return reg;
  }
  // An image of one layer (a text file, and `extra_bytes` of random data)
  // pushed as team/guest:<tag>; its manifest digest.
  std::string Push(const LoopbackRegistry& reg, const std::string& tag, size_t extra_bytes = 0) {
    const fs::path layer = fs::temp_directory_path() / ("image-e2e-layer-" + ns + "-" + tag);
    cleanup.push_back(layer);
    fs::create_directories(layer / "etc");
    std::ofstream(layer / "etc" / "motd") << "from an OCI image, tag " << tag << "\n";
    if (extra_bytes) {
      std::ifstream random("/dev/urandom", std::ios::binary);
      std::string bytes(extra_bytes, '\0');
      random.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      std::ofstream(layer / "etc" / "noise", std::ios::binary) << bytes;
    }
    const nlohmann::json pushed = PushImage(reg, {"--repo", "team/guest", "--tag", tag, "--layer-dir",
                                                  layer.string(), "--gzip", "--env", "GREETING=hi"});
    EXPECT_FALSE(pushed.is_discarded()) << "push_image.py failed (its stderr above)";
    return pushed.is_discarded() ? "" : pushed["manifest_digest"].get<std::string>();
  }
  // A node with the test guest as its default kernel, and the operator.
  void StartNodeAndOperator(std::vector<std::string> flags) {
    NodeOptions o;
    o.extra_flags = std::move(flags);
    o.extra_flags.push_back("--default-kernel=" + ImageRoot() + "/kubicle-testguest");
    auto n = NodeProcess::Start(ns + "-a", o);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node = std::move(*n);
    auto o2 = OperatorProcess::Start(ns);
    ASSERT_TRUE(o2.ok()) << o2.status().ToString();
    op = std::move(*o2);
  }
  // What a user writes: no kernel, no rootfs.
  void Apply(const std::string& name, const std::string& image) {
    const std::string manifest = "apiVersion: kubicle.dev/v1alpha1\nkind: SandboxTemplate\n"
                                 "metadata: {name: " + name + "}\n"
                                 "spec: {image: '" + image + "', memoryMiB: 64, warmup: [{command: [echo, warm]}]}\n";
    auto applied = Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, manifest);
    ASSERT_TRUE(applied.ok());
    ASSERT_EQ(applied->exit_code, 0) << applied->output;
  }
  Json Entry(const std::string& tmpl) {
    auto t = c->Get(kube::SandboxTemplateResource(), ns, tmpl);
    const Json e = t.ok() ? TemplateNodeEntry(*t, node->name()) : Json();
    return e.is_object() ? e : Json::object();
  }

  std::unique_ptr<kube::HttpKubeClient> c;
  std::string ns;
  std::unique_ptr<NodeProcess> node;
  std::unique_ptr<OperatorProcess> op;
  std::vector<fs::path> cleanup;
};

TEST_F(ImageTemplateE2E, AnImageInALoopbackRegistryBakesAndItsSandboxesRun) {
  auto reg = Registry({});
  if (!reg) GTEST_SKIP() << "no docker-registry (scripts/install-deps.sh)";
  const std::string digest = Push(*reg, "1");
  ASSERT_FALSE(digest.empty());
  ASSERT_NO_FATAL_FAILURE(StartNodeAndOperator({"--insecure-registry=" + reg->address()}));
  ASSERT_NO_FATAL_FAILURE(Apply("from-image", reg->address() + "/team/guest:1"));
  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "from-image", node->name(), 300s));
  ASSERT_TRUE(Eventually([&] {
    auto t = c->Get(kube::SandboxTemplateResource(), ns, "from-image");
    return t.ok() && (*t)["status"].value("phase", "") == "Ready";
  }, 60s));
  const Json entry = Entry("from-image");
  EXPECT_EQ(entry["imageDigest"], digest) << entry.dump();

  // The node's record of the bake: the built ext4 attached read-only.
  const std::string built = node->state_dir() + "/image-store/rootfs/" + digest.substr(7) + "-v1.ext4";
  auto baked = node->Admin("GET", "/v1/templates/" + entry["nodeTemplate"].get<std::string>());
  ASSERT_TRUE(baked.ok()) << baked.status().ToString();
  EXPECT_EQ((*baked)["spec"]["disks"], Json::array({built + ",ro"})) << baked->dump();
  EXPECT_EQ((*baked)["spec"]["kernel"], ImageRoot() + "/kubicle-testguest");
  EXPECT_TRUE(IsExt4(built)) << built;

  // A Sandbox of it runs.
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("s1", "from-image")).ok());
  ASSERT_TRUE(Eventually([&] {
    auto s = c->Get(kube::SandboxResource(), ns, "s1");
    return s.ok() && Phase(*s) == "Running" && VmState(*s) == "Running";
  }, 180s));
  auto echo = ExecInSandbox(c.get(), ns, "s1", {"echo", "from", "an", "image"});
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_EQ((*echo)["stdout"], "from an image\n");
  // And a fork of it, on the same node, with the image's disk as its own.
  Json fork = {{"metadata", {{"name", "f"}}}, {"spec", {{"sourceRef", {{"name", "s1"}}}, {"replicas", 1}}}};
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork).ok());
  ASSERT_TRUE(Eventually([&] {
    auto f = c->Get(kube::SandboxForkResource(), ns, "f");
    return f.ok() && (*f).value("status", Json::object()).value("readyReplicas", 0) == 1;
  }, 180s));
  auto child = ExecInSandbox(c.get(), ns, "f-0", {"echo", "from", "a", "fork"});
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ((*child)["stdout"], "from a fork\n");
  auto child_on_node = node->Admin("GET", "/v1/sandboxes/" + VmId(*c->Get(kube::SandboxResource(), ns, "f-0")));
  ASSERT_TRUE(child_on_node.ok()) << child_on_node.status().ToString();
  EXPECT_EQ((*child_on_node)["template"], entry["nodeTemplate"]) << child_on_node->dump();
  ASSERT_TRUE(c->Delete(kube::SandboxForkResource(), ns, "f").ok());
  ASSERT_TRUE(Eventually([&] { return !c->Get(kube::SandboxResource(), ns, "f-0").ok(); }, 120s));

  // Gone with its template: the built rootfs and every blob of the image.
  const fs::path store = node->state_dir() + "/image-store";
  EXPECT_EQ(FilesUnder(store / "blobs"), 2u) << "the layer and the config, verified";
  ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "s1").ok());
  ASSERT_TRUE(Eventually([&] { return !c->Get(kube::SandboxResource(), ns, "s1").ok(); }, 120s));
  ASSERT_TRUE(c->Delete(kube::SandboxTemplateResource(), ns, "from-image").ok());
  EXPECT_TRUE(Eventually([&] { return !fs::exists(built) && FilesUnder(store / "blobs") == 0; }, 120s))
      << FilesUnder(store / "blobs") << " blobs left";
}

// A private registry over TLS with basic auth: the node's --registry-config
// (config.json) and --registry-ca reach the pull. A moved tag is baked at
// the next generation; an image over --max-image-bytes fails saying so.
TEST_F(ImageTemplateE2E, APrivateTlsRegistryAMovedTagAndTheSizeLimit) {
  auto reg = Registry({.tls = true, .user = "alice", .password = "s3cret"});
  if (!reg) GTEST_SKIP() << "no docker-registry (scripts/install-deps.sh)";
  const std::string first = Push(*reg, "1");
  const std::string big = Push(*reg, "big", 3 << 20);  // random: gzip keeps it over 2 MiB
  ASSERT_FALSE(first.empty() || big.empty());
  const fs::path config = fs::temp_directory_path() / ("image-e2e-config-" + ns + ".json");
  cleanup.push_back(config);
  std::ofstream(config) << reg->docker_config();
  ASSERT_NO_FATAL_FAILURE(StartNodeAndOperator({"--registry-config=" + config.string(),
                                                "--registry-ca=" + reg->ca_file(), "--max-image-bytes=2097152"}));
  ASSERT_NO_FATAL_FAILURE(Apply("private", reg->address() + "/team/guest:1"));
  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "private", node->name(), 300s)) << Entry("private").dump();
  EXPECT_EQ(Entry("private")["imageDigest"], first);

  // The tag moves; generation 1 keeps what it baked, generation 2 takes the new image.
  const std::string moved = Push(*reg, "1", 1024);
  ASSERT_FALSE(moved.empty());
  ASSERT_NE(moved, first);
  ASSERT_TRUE(c->Patch(kube::SandboxTemplateResource(), ns, "private", kube::PatchType::kMerge,
                       Json{{"spec", {{"memoryMiB", 96}}}}).ok());
  ASSERT_TRUE(Eventually([&] {
    const Json e = Entry("private");
    return e.is_object() && e.value("observedGeneration", 0) == 2 && e.value("phase", "") == "Ready";
  }, 300s)) << Entry("private").dump();
  EXPECT_EQ(Entry("private")["imageDigest"], moved);
  const std::string old_built = node->state_dir() + "/image-store/rootfs/" + first.substr(7) + "-v1.ext4";
  EXPECT_TRUE(Eventually([&] { return !fs::exists(old_built); }, 120s)) << "generation 1's image collected";

  ASSERT_NO_FATAL_FAILURE(Apply("too-big", reg->address() + "/team/guest:big"));
  ASSERT_TRUE(Eventually([&] { return Entry("too-big").value("phase", "") == "Failed"; }, 120s))
      << Entry("too-big").dump();
  EXPECT_NE(Entry("too-big").value("message", "").find("more than the limit"), std::string::npos)
      << Entry("too-big").dump();
}

}  // namespace
}  // namespace kubicle::e2e
