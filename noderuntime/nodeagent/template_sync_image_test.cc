// TemplateSync with templates from container images (spec.image), against
// the in-memory apiserver and node runtime, an ImageRootfsCache over a
// scripted puller and a builder that writes a small file: the built rootfs
// is attached read-only, the digest reported, one build per image, a moved
// tag baked at the next generation, unused images collected; the node's
// default guest kernel. The real registry and builder: e2e/node_e2e_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kube/fake_kube_client.h"
#include "kube/json_fields.h"
#include "noderuntime/nodeagent/node_names.h"
#include "noderuntime/nodeagent/template_sync.h"
#include "noderuntime/nodeagent/testing/fake_image_puller.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace fs = std::filesystem;
using kube::Json;
using kube::StrAt;
using testing::FakeDigest;

constexpr char kNs[] = "team";
constexpr char kImage[] = "reg.example:5000/team/py:3.12";

bool Eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

class TemplateSyncImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("template-sync-image-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "images");
    fs::create_directories(dir_ / "guest");
    for (const char* f : {"images/kernel", "images/rootfs", "guest/vmlinux", "guest/initramfs.cpio"}) {
      std::ofstream(dir_ / f) << "image";
    }
    config_.node_name = "n1";
    config_.endpoint = "10.0.0.7:7443";
    config_.images.roots = {(dir_ / "images").string()};
    config_.images.cache_dir = (dir_ / "cache").string();
    config_.default_kernel = (dir_ / "guest" / "vmlinux").string();
    config_.default_initrd = (dir_ / "guest" / "initramfs.cpio").string();
    config_.resync = std::chrono::seconds(1);
    auto puller = std::make_unique<testing::FakeImagePuller>();
    puller_ = puller.get();
    puller_->Set(kImage, FakeDigest('a'));
    config_.image_rootfs = std::make_shared<ImageRootfsCache>(
        (dir_ / "store" / "rootfs").string(), 1, std::move(puller),
        [this](const oci::PulledImage& image, const std::string& out, const ProgressFn& progress) {
          ++builds_;
          // Held: reports on and on, as oci::BuildRootfs does about once a second.
          while (hold_build_) {
            if (progress) progress("unpacking layer 1 of 1");
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          std::ofstream(out) << "ext4 of " << image.manifest_digest;
          return Status::Ok();
        });
  }
  void TearDown() override {
    hold_build_ = false;  // a failed assertion must not leave a build held
    sync_.reset();
    fs::remove_all(dir_);
  }
  void Start() {
    sync_ = std::make_unique<TemplateSync>(&kube_, &svc_, config_, &registry_);
    sync_->Start();
  }

  Json Create(const std::string& name, Json spec) {
    auto r = kube_.Create(kube::SandboxTemplateResource(), kNs, Json{{"metadata", {{"name", name}}}, {"spec", spec}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  std::optional<NodeEntry> Entry(const std::string& name) {
    auto t = kube_.Get(kube::SandboxTemplateResource(), kNs, name);
    return t.ok() ? EntryOf(*t, "n1") : std::nullopt;
  }
  bool EntryIs(const std::string& name, const std::string& phase, int64_t generation = 1) {
    auto e = Entry(name);
    return e && e->phase == phase && e->observed_generation == generation;
  }
  std::string BuiltPath(char digest) const {
    return (dir_ / "store" / "rootfs" / (std::string(64, digest) + "-v1.ext4")).string();
  }

  fs::path dir_;
  AgentConfig config_;
  kube::FakeKubeClient kube_;
  server::testing::FakeSandboxService svc_;
  metrics::Registry registry_;
  testing::FakeImagePuller* puller_ = nullptr;
  std::atomic<int> builds_{0};
  std::atomic<bool> hold_build_{false};  // a build in progress until cleared
  std::unique_ptr<TemplateSync> sync_;
};

TEST_F(TemplateSyncImageTest, AnImageTemplateBakesItsBuiltRootfsReadOnlyAndReportsTheDigest) {
  Start();
  Json t = Create("py", {{"image", kImage}, {"memoryMiB", 256}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("py", "Ready"); })) << (Entry("py") ? Entry("py")->message : "");
  EXPECT_EQ(Entry("py")->image_digest, FakeDigest('a'));
  auto baked = svc_.GetTemplate(TemplateNodeId(StrAt(t, {"metadata", "uid"}), 1));
  ASSERT_TRUE(baked.ok());
  EXPECT_EQ(baked->spec.disks, std::vector<std::string>{BuiltPath('a') + ",ro"});
  EXPECT_NE(baked->spec.cmdline.find("kubicle.overlay=tmpfs"), std::string::npos) << baked->spec.cmdline;
  // No spec.kernel: the node's default guest, initrd included.
  EXPECT_EQ(baked->spec.kernel, config_.default_kernel);
  EXPECT_EQ(baked->spec.initrd, config_.default_initrd);
  EXPECT_EQ(builds_, 1);

  // A second template of the same image: pulled again (a tag may move),
  // built once.
  Create("py-2", {{"image", kImage}, {"memoryMiB", 512}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("py-2", "Ready"); }));
  EXPECT_EQ(Entry("py-2")->image_digest, FakeDigest('a'));
  EXPECT_EQ(builds_, 1);
  EXPECT_EQ(puller_->pulls(), 2);
}

// While an image is pulled and built, the template's status.nodes[] entry
// says Baking with the builder's progress (at most one write a second), as
// a kernel download does.
TEST_F(TemplateSyncImageTest, AnImageBuildInProgressShowsInStatusNodes) {
  hold_build_ = true;
  Start();
  Create("py", {{"image", kImage}});
  ASSERT_TRUE(Eventually([&] {
    auto e = Entry("py");
    return e && e->phase == "Baking" && e->message == "unpacking layer 1 of 1";
  })) << (Entry("py") ? Entry("py")->phase + ": " + Entry("py")->message : "no entry");
  EXPECT_EQ(Entry("py")->image_digest, "");  // not reported until baked
  hold_build_ = false;
  ASSERT_TRUE(Eventually([&] { return EntryIs("py", "Ready"); }));
  EXPECT_EQ(Entry("py")->image_digest, FakeDigest('a'));
  EXPECT_EQ(Entry("py")->message.find("unpacking"), std::string::npos) << Entry("py")->message;
  EXPECT_EQ(builds_, 1);
}

TEST_F(TemplateSyncImageTest, ARestartedAgentReportsTheDigestItBakedWithoutPullingAgain) {
  Start();
  Create("py", {{"image", kImage}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("py", "Ready"); }));
  EXPECT_EQ(puller_->pulls(), 1);
  sync_.reset();
  // The entry gone (as after an apiserver restore); the tag moved meanwhile.
  ASSERT_TRUE(kube_.Patch(kube::SandboxTemplateResource(), kNs, "py", kube::PatchType::kMerge,
                          Json{{"status", {{"nodes", Json::array()}}}}, "status").ok());
  ASSERT_FALSE(Entry("py"));
  puller_->Set(kImage, FakeDigest('b'));
  Start();
  ASSERT_TRUE(Eventually([&] { return EntryIs("py", "Ready"); }));
  EXPECT_EQ(Entry("py")->image_digest, FakeDigest('a')) << "what generation 1 baked, read from its disk";
  EXPECT_EQ(puller_->pulls(), 1);
  EXPECT_TRUE(fs::exists(BuiltPath('a'))) << "in use: the start's collection kept it";
}

TEST_F(TemplateSyncImageTest, HandBuiltRootfsTemplatesReportNoImageDigest) {
  Start();
  Create("hand", {{"kernel", (dir_ / "images" / "kernel").string()}, {"rootfs", (dir_ / "images" / "rootfs").string()}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("hand", "Ready"); }));
  EXPECT_EQ(Entry("hand")->image_digest, "");
  EXPECT_EQ(puller_->pulls(), 0);
  // A rootfs template without a kernel bakes the node's default too.
  Create("hand-default", {{"rootfs", (dir_ / "images" / "rootfs").string()}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("hand-default", "Ready"); }));
  for (const TemplateInfo& t : svc_.ListTemplates()) {
    if (t.spec.kernel == config_.default_kernel) return;
  }
  ADD_FAILURE() << "no node template runs the default kernel";
}

TEST_F(TemplateSyncImageTest, AMovedTagIsBakedAtTheNextGenerationAndTheOldImageCollected) {
  Start();
  Create("py", {{"image", kImage}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("py", "Ready"); }));
  puller_->Set(kImage, FakeDigest('b'));  // pushed again: generation 1 keeps what it baked
  ASSERT_TRUE(kube_.Patch(kube::SandboxTemplateResource(), kNs, "py", kube::PatchType::kMerge,
                          Json{{"spec", {{"memoryMiB", 512}}}}).ok());
  ASSERT_TRUE(Eventually([&] { return EntryIs("py", "Ready", 2); }));
  EXPECT_EQ(Entry("py")->image_digest, FakeDigest('b'));
  // Generation 1's node template goes, and with it the image it alone used.
  EXPECT_TRUE(Eventually([&] { return !fs::exists(BuiltPath('a')); }));
  EXPECT_TRUE(fs::exists(BuiltPath('b')));
  EXPECT_EQ(puller_->collected_keep(), std::set<std::string>{FakeDigest('b')});
}

TEST_F(TemplateSyncImageTest, RemovingTheLastTemplateOfAnImageCollectsIt) {
  Start();
  Create("py", {{"image", kImage}});
  Create("py-2", {{"image", kImage}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("py", "Ready") && EntryIs("py-2", "Ready"); }));
  ASSERT_TRUE(kube_.Delete(kube::SandboxTemplateResource(), kNs, "py").ok());
  ASSERT_TRUE(Eventually([&] { return svc_.ListTemplates().size() == 1; }));
  EXPECT_TRUE(Eventually([&] { return puller_->collections() >= 2; })) << "at start, then at the removal";
  EXPECT_TRUE(fs::exists(BuiltPath('a'))) << "py-2 still uses it";
  EXPECT_EQ(puller_->collected_keep(), std::set<std::string>{FakeDigest('a')});
  ASSERT_TRUE(kube_.Delete(kube::SandboxTemplateResource(), kNs, "py-2").ok());
  EXPECT_TRUE(Eventually([&] { return !fs::exists(BuiltPath('a')); }));
  EXPECT_TRUE(Eventually([&] { return puller_->collected_keep().empty(); }));
}

TEST_F(TemplateSyncImageTest, StartCollectsWhatNoNodeTemplateUses) {
  // A previous run's image of a template gone since, and a build it crashed in.
  fs::create_directories(dir_ / "store" / "rootfs");
  std::ofstream(BuiltPath('c')) << "old";
  std::ofstream(BuiltPath('d') + ".building-00000000deadbeef") << "half";
  Start();
  EXPECT_FALSE(fs::exists(BuiltPath('c')));
  EXPECT_FALSE(fs::exists(BuiltPath('d') + ".building-00000000deadbeef"));
  EXPECT_EQ(puller_->collections(), 1);
  EXPECT_TRUE(puller_->collected_keep().empty());
}

TEST_F(TemplateSyncImageTest, WhatANodeCannotDoFailsTheTemplateSayingWhy) {
  config_.default_kernel.clear();
  config_.default_initrd.clear();
  Start();
  Create("no-kernel", {{"image", kImage}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("no-kernel", "Failed"); }));
  EXPECT_EQ(Entry("no-kernel")->message,
            "spec.kernel is not set and this node has no default guest kernel (kubicle-node serve --default-kernel)");
  // A registry that is down: the pull's error (Unavailable: retried 30 s on).
  Create("down", {{"kernel", (dir_ / "images" / "kernel").string()}, {"image", "reg.example:5000/team/gone:1"}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("down", "Failed"); }));
  EXPECT_EQ(Entry("down")->message, "registry down for reg.example:5000/team/gone:1");
  // Both image and rootfs (a CRD without its schema): refused, nothing pulled for it.
  Create("both", {{"kernel", (dir_ / "images" / "kernel").string()}, {"image", kImage},
                  {"rootfs", (dir_ / "images" / "rootfs").string()}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("both", "Failed"); }));
  EXPECT_EQ(Entry("both")->message, "exactly one of spec.image and spec.rootfs is required");
}

TEST_F(TemplateSyncImageTest, ANodeWithoutAnImageStoreOrWithAMissingDefaultGuestSaysSo) {
  config_.image_rootfs.reset();
  config_.default_kernel = (dir_ / "guest" / "missing-vmlinux").string();
  Start();
  Create("py", {{"kernel", (dir_ / "images" / "kernel").string()}, {"image", kImage}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("py", "Failed"); }));
  EXPECT_EQ(Entry("py")->message, "spec.image: this node pulls no container images");
  Create("hand", {{"rootfs", (dir_ / "images" / "rootfs").string()}});
  ASSERT_TRUE(Eventually([&] { return EntryIs("hand", "Failed"); }));
  EXPECT_EQ(Entry("hand")->message, "spec.kernel is not set and the node's default guest file " +
                                        config_.default_kernel + " (--default-kernel) is missing");
}

}  // namespace
}  // namespace kubicle::noderuntime::nodeagent
