// e2e of templates from container images (issue 24): a real registry on
// loopback (Debian's docker-registry, e2e/registry/), an image pushed to it,
// `kubectl apply` of a SandboxTemplate naming it, a real kubicle-node that
// pulls it over plain HTTP (--insecure-registry), builds the ext4 root
// filesystem and bakes it with its default guest kernel (the test guest,
// which ignores the disk: the node's records show it attached), the real
// operator, a Sandbox from it running commands; then the template removed
// and the node collecting its image. Skips without the control plane, KVM
// or docker-registry.
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

TEST(ImageTemplateE2E, AnImageInALoopbackRegistryBakesAndItsSandboxesRun) {
  KUBICLE_REQUIRE_CLUSTER();
  KUBICLE_REQUIRE_KVM();
  LoopbackRegistry reg({});
  if (reg.missing_package()) GTEST_SKIP() << reg.error();
  ASSERT_TRUE(reg.ok()) << reg.error();

  auto c = NewClient();
  const std::string ns = TestNamespace(c.get());
  const fs::path layer = fs::temp_directory_path() / ("image-e2e-layer-" + ns);
  fs::create_directories(layer / "etc");
  std::ofstream(layer / "etc" / "motd") << "from an OCI image\n";
  const nlohmann::json pushed = PushImage(reg, {"--repo", "team/guest", "--tag", "1", "--layer-dir", layer.string(),
                                                "--gzip", "--env", "GREETING=hi"});
  fs::remove_all(layer);
  ASSERT_FALSE(pushed.is_discarded()) << "push_image.py failed (its stderr above)";
  const std::string digest = pushed["manifest_digest"];

  ASSERT_TRUE(WriteTestGuestImages(ImageRoot()).ok());
  NodeOptions o;
  o.extra_flags = {"--insecure-registry=" + reg.address(), "--default-kernel=" + ImageRoot() + "/kubicle-testguest"};
  auto node = NodeProcess::Start(ns + "-a", o);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  auto op = OperatorProcess::Start(ns);
  ASSERT_TRUE(op.ok()) << op.status().ToString();

  // What a user writes: no kernel, no rootfs.
  const std::string manifest = "apiVersion: kubicle.dev/v1alpha1\nkind: SandboxTemplate\n"
                               "metadata: {name: from-image}\n"
                               "spec: {image: '" + reg.address() + "/team/guest:1', memoryMiB: 64,"
                               " warmup: [{command: [echo, warm]}]}\n";
  auto applied = Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, manifest);
  ASSERT_TRUE(applied.ok());
  ASSERT_EQ(applied->exit_code, 0) << applied->output;
  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "from-image", (*node)->name(), 300s)) << (*node)->LogTail();
  ASSERT_TRUE(Eventually([&] {
    auto t = c->Get(kube::SandboxTemplateResource(), ns, "from-image");
    return t.ok() && (*t)["status"].value("phase", "") == "Ready";
  }, 60s));
  const Json tmpl = *c->Get(kube::SandboxTemplateResource(), ns, "from-image");
  const Json entry = TemplateNodeEntry(tmpl, (*node)->name());
  EXPECT_EQ(entry["imageDigest"], digest) << entry.dump();

  // The node's record of the bake: the built ext4 attached read-only.
  const std::string built = (*node)->state_dir() + "/image-store/rootfs/" + digest.substr(7) + "-v1.ext4";
  auto baked = (*node)->Admin("GET", "/v1/templates/" + entry["nodeTemplate"].get<std::string>());
  ASSERT_TRUE(baked.ok()) << baked.status().ToString();
  EXPECT_EQ((*baked)["spec"]["disks"], Json::array({built + ",ro"})) << baked->dump();
  EXPECT_EQ((*baked)["spec"]["kernel"], ImageRoot() + "/kubicle-testguest");
  EXPECT_TRUE(IsExt4(built)) << built;

  // A Sandbox of it runs.
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("s1", "from-image")).ok());
  ASSERT_TRUE(Eventually([&] {
    auto s = c->Get(kube::SandboxResource(), ns, "s1");
    return s.ok() && Phase(*s) == "Running" && VmState(*s) == "Running";
  }, 180s)) << (*node)->LogTail();
  auto echo = ExecInSandbox(c.get(), ns, "s1", {"echo", "from", "an", "image"});
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_EQ((*echo)["stdout"], "from an image\n");

  // Gone with its template: the built rootfs and every blob of the image.
  const fs::path store = (*node)->state_dir() + "/image-store";
  EXPECT_EQ(FilesUnder(store / "blobs"), 2u) << "the layer and the config, verified";
  ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "s1").ok());
  ASSERT_TRUE(Eventually([&] { return !c->Get(kube::SandboxResource(), ns, "s1").ok(); }, 120s));
  ASSERT_TRUE(c->Delete(kube::SandboxTemplateResource(), ns, "from-image").ok());
  EXPECT_TRUE(Eventually([&] { return !fs::exists(built) && FilesUnder(store / "blobs") == 0; }, 120s))
      << FilesUnder(store / "blobs") << " blobs left; " << (*node)->LogTail();
  (*op)->Stop();
}

}  // namespace
}  // namespace kubicle::e2e
