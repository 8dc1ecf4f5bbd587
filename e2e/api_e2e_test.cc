// e2e against the real apiserver, no operator: the CRDs refuse invalid
// objects with clear messages (schema and CEL), the Helm chart lints and its
// manifests pass server-side dry-run, and the C++ client's conflict, 410
// Gone, watch and leader-election paths behave as documented; the chart's
// RBAC and node admission policy keep each identity to its own writes.
#include <gtest/gtest.h>

#include <cctype>

#include "e2e/e2e_env.h"
#include "kube/leader_election.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

using kube::Json;

struct Case {
  const char* manifest;
  const char* message;  // must appear in kubectl's error
};

TEST(ApiE2E, InvalidManifestsAreRefusedWithClearMessages) {
  KUBICLE_REQUIRE_CLUSTER();
  auto c = NewClient();
  std::string ns = TestNamespace(c.get());
  const Case cases[] = {
      {"kind: Sandbox\nmetadata: {name: a}\nspec: {templateRef: {name: t}, ttlSeconds: 0}",
       "spec.ttlSeconds in body should be greater than or equal to 1"},
      {"kind: Sandbox\nmetadata: {name: a}\nspec: {templateRef: {name: t}, ttlSeconds: 2592001}",
       "spec.ttlSeconds in body should be less than or equal to 2592000"},
      {"kind: Sandbox\nmetadata: {name: a}\nspec: {templateRef: {name: t}, ttlSeconds: 5, "
       "expiresAt: '2030-01-01T00:00:00Z'}",
       "set at most one of spec.ttlSeconds and spec.expiresAt"},
      {"kind: Sandbox\nmetadata: {name: a}\nspec: {ttlSeconds: 5}", "spec.templateRef: Required value"},
      {"kind: Sandbox\nmetadata: {name: a}\nspec: {templateRef: {name: t}, env: [{name: '1BAD'}]}",
       "spec.env[0].name in body should match"},
      {"kind: SandboxFork\nmetadata: {name: f}\nspec: {sourceRef: {name: s}, replicas: 0}",
       "spec.replicas in body should be greater than or equal to 1"},
      {"kind: SandboxFork\nmetadata: {name: f}\nspec: {sourceRef: {name: s}, replicas: 101}",
       "spec.replicas in body should be less than or equal to 100"},
      {"kind: SandboxTemplate\nmetadata: {name: t}\nspec: {kernel: /k, rootfs: /r, vcpus: 65}",
       "spec.vcpus in body should be less than or equal to 64"},
      {"kind: SandboxTemplate\nmetadata: {name: t}\nspec: {image: 'reg.example:5000/py:3', rootfs: /r}",
       "exactly one of spec.image and spec.rootfs is required"},
      {"kind: SandboxTemplate\nmetadata: {name: t}\nspec: {kernel: /k}",
       "exactly one of spec.image and spec.rootfs is required"},
      {"kind: SandboxTemplate\nmetadata: {name: t}\nspec: {image: 'python:3.12'}",
       "spec.image in body should match"},
      {"kind: SandboxTemplate\nmetadata: {name: t}\nspec: {image: 'reg.example/py@sha256:abc'}",
       "spec.image in body should match"},
      {"kind: Workspace\nmetadata: {name: w}\nspec: {sizeMiB: 7}",
       "spec.sizeMiB in body should be greater than or equal to 8"},
      {"kind: Workspace\nmetadata: {name: w}\nspec: {sizeMiB: 1048577}",
       "spec.sizeMiB in body should be less than or equal to 1048576"},
  };
  for (const Case& k : cases) {
    std::string m = std::string("apiVersion: kubicle.dev/v1alpha1\n") + k.manifest;
    auto r = Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, m);
    ASSERT_TRUE(r.ok());
    EXPECT_NE(r->exit_code, 0) << m;
    EXPECT_NE(r->output.find(k.message), std::string::npos) << "got: " << r->output;
  }
  // A template from an image needs neither kernel (the node's default) nor rootfs.
  for (const char* image : {"reg.example:5000/team/py:3.12", "localhost/py@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}) {
    auto ok = Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"},
                                 std::string("apiVersion: kubicle.dev/v1alpha1\nkind: SandboxTemplate\n"
                                             "metadata: {name: img}\nspec: {image: '") + image + "'}");
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->exit_code, 0) << image << ": " << ok->output;
  }
  // Transition rules: the template and the fork source are immutable.
  std::string sbx = "apiVersion: kubicle.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: ok}\n"
                    "spec: {templateRef: {name: t}}";
  ASSERT_EQ(Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, sbx)->exit_code, 0);
  auto r = Cluster()->Kubectl({"patch", "-n", ns, "sbx", "ok", "--type=merge", "-p",
                               R"({"spec":{"templateRef":{"name":"other"}}})"});
  EXPECT_NE(r->output.find("spec.templateRef is immutable"), std::string::npos) << r->output;
  r = Cluster()->Kubectl({"patch", "-n", ns, "sbx", "ok", "--type=merge", "-p",
                          R"({"spec":{"forkSource":"x"}})"});
  EXPECT_NE(r->output.find("spec.forkSource cannot be added or removed"), std::string::npos) << r->output;
  std::string fork = "apiVersion: kubicle.dev/v1alpha1\nkind: SandboxFork\nmetadata: {name: f}\n"
                     "spec: {sourceRef: {name: ok}}";
  ASSERT_EQ(Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, fork)->exit_code, 0);
  r = Cluster()->Kubectl({"patch", "-n", ns, "sbxf", "f", "--type=merge", "-p",
                          R"({"spec":{"sourceRef":{"name":"x"}}})"});
  EXPECT_NE(r->output.find("spec.sourceRef is immutable"), std::string::npos) << r->output;
  // A Workspace's size and a Sandbox's workspaceRef are immutable.
  ASSERT_EQ(Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"},
                               "apiVersion: kubicle.dev/v1alpha1\nkind: Workspace\nmetadata: {name: w}\n"
                               "spec: {sizeMiB: 64}")->exit_code, 0);
  r = Cluster()->Kubectl({"patch", "-n", ns, "ws", "w", "--type=merge", "-p", R"({"spec":{"sizeMiB":128}})"});
  EXPECT_NE(r->output.find("spec.sizeMiB is immutable"), std::string::npos) << r->output;
  r = Cluster()->Kubectl({"patch", "-n", ns, "sbx", "ok", "--type=merge", "-p",
                          R"({"spec":{"workspaceRef":{"name":"w"}}})"});
  EXPECT_NE(r->output.find("spec.workspaceRef cannot be added or removed"), std::string::npos) << r->output;
  // Defaults applied by the apiserver.
  auto f = c->Get(kube::SandboxForkResource(), ns, "f");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)["spec"]["replicas"], 1);
}

// spec.tokenSha256, a client's own token as its hash (docs/api.md): the
// apiserver refuses anything but 64 lowercase hex digits with the CRD's
// CEL message, keeps a valid one as written, and refuses changing, adding
// or removing it after the create.
TEST(ApiE2E, AClientsTokenHashIsValidatedAndImmutable) {
  KUBICLE_REQUIRE_CLUSTER();
  auto c = NewClient();
  std::string ns = TestNamespace(c.get());
  const std::string kHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  const std::string kMalformed =
      "spec.tokenSha256 must be the hex SHA-256 of the client's token: exactly 64 lowercase hex "
      "digits";
  auto sandbox = [](const std::string& name, const std::string& hash) {
    return "apiVersion: kubicle.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: " + name +
           "}\nspec: {templateRef: {name: t}, tokenSha256: '" + hash + "'}";
  };
  std::string upper = kHex;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  for (const std::string& bad : {upper, kHex.substr(0, 63), kHex.substr(0, 32),
                                 std::string(64, 'g'), kHex.substr(0, 62) + " a", std::string()}) {
    auto r = Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, sandbox("bad", bad));
    ASSERT_TRUE(r.ok());
    EXPECT_NE(r->exit_code, 0) << bad;
    EXPECT_NE(r->output.find(kMalformed), std::string::npos) << bad << " got: " << r->output;
  }
  // Over 64 characters: the schema's maxLength (which bounds the CEL
  // rule's cost) refuses it.
  auto r = Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, sandbox("bad", kHex + "0"));
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("spec.tokenSha256: Too long: may not be more than 64"),
            std::string::npos)
      << r->output;
  EXPECT_FALSE(c->Get(kube::SandboxResource(), ns, "bad").ok());

  ASSERT_EQ(Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, sandbox("own", kHex))->exit_code, 0);
  auto own = c->Get(kube::SandboxResource(), ns, "own");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ((*own)["spec"]["tokenSha256"], kHex);
  std::string other = kHex;
  other[0] = 'f';
  r = Cluster()->Kubectl({"patch", "-n", ns, "sbx", "own", "--type=merge", "-p",
                          R"({"spec":{"tokenSha256":")" + other + R"("}})"});
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("spec.tokenSha256 is immutable"), std::string::npos) << r->output;
  r = Cluster()->Kubectl(
      {"patch", "-n", ns, "sbx", "own", "--type=merge", "-p", R"({"spec":{"tokenSha256":null}})"});
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("spec.tokenSha256 cannot be added or removed"), std::string::npos)
      << r->output;
  const std::string minted =
      "apiVersion: kubicle.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: minted}\n"
      "spec: {templateRef: {name: t}}";
  ASSERT_EQ(Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, minted)->exit_code, 0);
  r = Cluster()->Kubectl({"patch", "-n", ns, "sbx", "minted", "--type=merge", "-p",
                          R"({"spec":{"tokenSha256":")" + kHex + R"("}})"});
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("spec.tokenSha256 cannot be added or removed"), std::string::npos)
      << r->output;
  EXPECT_EQ((*c->Get(kube::SandboxResource(), ns, "own"))["spec"]["tokenSha256"], kHex);
  EXPECT_FALSE((*c->Get(kube::SandboxResource(), ns, "minted"))["spec"].contains("tokenSha256"));

  // A SandboxFork's children's hashes (spec.childTokenSha256): each item
  // as strict, the list immutable.
  auto fork = [](const std::string& hashes) {
    return "apiVersion: kubicle.dev/v1alpha1\nkind: SandboxFork\nmetadata: {name: f}\n"
           "spec: {sourceRef: {name: own}, replicas: 2, childTokenSha256: [" +
           hashes + "]}";
  };
  r = Cluster()->Kubectl({"apply", "-n", ns, "-f", "-"}, fork("'" + kHex + "', '" + upper + "'"));
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("spec.childTokenSha256 items must be the hex SHA-256 of a child's "
                           "token: exactly 64 lowercase hex digits"),
            std::string::npos)
      << r->output;
  ASSERT_EQ(Cluster()
                ->Kubectl({"apply", "-n", ns, "-f", "-"}, fork("'" + kHex + "', '" + other + "'"))
                ->exit_code,
            0);
  r = Cluster()->Kubectl({"patch", "-n", ns, "sbxf", "f", "--type=merge", "-p",
                          R"({"spec":{"childTokenSha256":[")" + other + R"("]}})"});
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("spec.childTokenSha256 is immutable"), std::string::npos) << r->output;
}

// The examples (examples/README.md) are accepted by the CRDs as written,
// the image template's registry reference included.
TEST(ApiE2E, ExamplesPassServerSideDryRun) {
  KUBICLE_REQUIRE_CLUSTER();
  auto c = NewClient();
  std::string ns = TestNamespace(c.get());
  for (const char* file : {"template.yaml", "swarm.yaml", "python/template.yaml", "image/template.yaml"}) {
    const std::string path = std::string(KUBICLE_SOURCE_DIR) + "/examples/" + file;
    auto r = Cluster()->Kubectl({"apply", "--dry-run=server", "-n", ns, "-f", path});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 0) << file << ": " << r->output;
  }
}

TEST(ApiE2E, HelmChartLintsAndPassesServerSideDryRun) {
  KUBICLE_REQUIRE_CLUSTER();
  std::string chart = std::string(KUBICLE_SOURCE_DIR) + "/helm/kubicle";
  auto lint = Cluster()->Helm({"lint", "--strict", chart});
  ASSERT_TRUE(lint.ok());
  EXPECT_EQ(lint->exit_code, 0) << lint->output;
  // helm template renders offline; tell it the server's version for kubeVersion.
  auto ver = Cluster()->Kubectl({"version", "-o", "json"});
  ASSERT_TRUE(ver.ok());
  Json v = Json::parse(ver->output, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << ver->output;
  std::string server_version = v["serverVersion"]["gitVersion"];
  auto tmpl = Cluster()->Helm({"template", "kubicle", chart, "--namespace", kSystemNs,
                               "--kube-version", server_version,
                               "--include-crds", "--set", "node.createLeaseNamespace=false"});
  ASSERT_TRUE(tmpl.ok());
  ASSERT_EQ(tmpl->exit_code, 0) << tmpl->output;
  auto apply = Cluster()->Kubectl({"apply", "--dry-run=server", "-f", "-"},
                                  tmpl->output);
  ASSERT_TRUE(apply.ok());
  EXPECT_EQ(apply->exit_code, 0) << apply->output;
  EXPECT_NE(apply->output.find("daemonset.apps/kubicle-node created (server dry run)"),
            std::string::npos) << apply->output;
  EXPECT_NE(apply->output.find("deployment.apps/kubicle-operator created (server dry run)"),
            std::string::npos) << apply->output;
}

TEST(ApiE2E, ConflictingUpdatesAreDetectedAndRetried) {
  KUBICLE_REQUIRE_CLUSTER();
  auto a = NewClient();
  auto b = NewClient();
  std::string ns = TestNamespace(a.get());
  ASSERT_TRUE(a->Create(kube::SandboxResource(), ns, SandboxManifest("c", "t")).ok());
  Json stale = *a->Get(kube::SandboxResource(), ns, "c");
  Json fresh = stale;
  fresh["metadata"]["labels"]["by"] = "b";
  ASSERT_TRUE(b->Update(kube::SandboxResource(), ns, fresh).ok());
  stale["metadata"]["labels"]["by"] = "a";
  Status s = a->Update(kube::SandboxResource(), ns, stale).status();
  EXPECT_TRUE(kube::IsConflict(s)) << s.ToString();
  int attempts = 0;
  Status retried = kube::RetryOnConflict(5, [&] {
    ++attempts;
    Json obj = attempts == 1 ? stale : *a->Get(kube::SandboxResource(), ns, "c");
    obj["metadata"]["labels"]["by"] = "a";
    return a->Update(kube::SandboxResource(), ns, obj).status();
  });
  EXPECT_TRUE(retried.ok()) << retried.ToString();
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ((*a->Get(kube::SandboxResource(), ns, "c"))["metadata"]["labels"]["by"], "a");
}

TEST(ApiE2E, WatchDeliversEventsBookmarksAndGone) {
  KUBICLE_REQUIRE_CLUSTER();
  auto c = NewClient();
  std::string ns = TestNamespace(c.get());
  auto list = c->List(kube::SandboxResource(), ns, {});
  ASSERT_TRUE(list.ok());
  kube::WatchOptions o;
  o.resource_version = (*list)["metadata"]["resourceVersion"];
  o.timeout_seconds = 10;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (void)c->Create(kube::SandboxResource(), ns, SandboxManifest("w1", "t"));
    (void)c->Delete(kube::SandboxResource(), ns, "w1");
  });
  std::vector<std::string> seen;
  kube::CancelToken cancel;
  Status s = c->Watch(kube::SandboxResource(), ns, o, [&](const kube::WatchEvent& e) {
    if (e.type != kube::WatchEventType::kBookmark) seen.push_back(std::string(WatchEventTypeName(e.type)));
    return seen.size() < 2;
  }, cancel);
  writer.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED", "DELETED"}));
  // A resourceVersion from before the apiserver's history: 410 Gone.
  o.resource_version = "1";
  Status gone = c->Watch(kube::SandboxResource(), ns, o, [](const kube::WatchEvent&) { return true; },
                         cancel);
  EXPECT_TRUE(kube::IsGone(gone)) << gone.ToString();
  // Cancellation ends a quiet watch promptly.
  o.resource_version = (*c->List(kube::SandboxResource(), ns, {}))["metadata"]["resourceVersion"];
  o.timeout_seconds = 60;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel.Cancel();
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c->Watch(kube::SandboxResource(), ns, o, [](const kube::WatchEvent&) { return true; },
                       cancel).ok());
  canceller.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(ApiE2E, LeaderElectionOnARealLease) {
  KUBICLE_REQUIRE_CLUSTER();
  auto c = NewClient();
  kube::LeaderElectionConfig cfg{kSystemNs, "e2e-leader", "a", std::chrono::seconds(15),
                                 std::chrono::seconds(10), std::chrono::seconds(2)};
  kube::LeaderElector a(c.get(), cfg);
  cfg.identity = "b";
  kube::LeaderElector b(c.get(), cfg);
  EXPECT_TRUE(*a.TryAcquireOrRenew());
  EXPECT_FALSE(*b.TryAcquireOrRenew());
  EXPECT_TRUE(*a.TryAcquireOrRenew());
  ASSERT_TRUE(a.Release().ok());
  EXPECT_TRUE(*b.TryAcquireOrRenew());
}

TEST(ApiE2E, DeleteCollectionByLabel) {
  KUBICLE_REQUIRE_CLUSTER();
  auto c = NewClient();
  std::string ns = TestNamespace(c.get());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c->Create(kube::SandboxResource(), ns,
                          SandboxManifest("d" + std::to_string(i), "t",
                                          {{"kubicle.dev/run", i < 2 ? "x" : "y"}})).ok());
  }
  ASSERT_TRUE(c->DeleteCollection(kube::SandboxResource(), ns, "kubicle.dev/run=x").ok());
  auto left = c->List(kube::SandboxResource(), ns, {});
  ASSERT_EQ((*left)["items"].size(), 1u);
  EXPECT_EQ((*left)["items"][0]["metadata"]["name"], "d2");
}

// ---- Trust boundaries: the chart's RBAC and node admission policy ----------

class TrustE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    KUBICLE_REQUIRE_CLUSTER();
    admin = NewClient();
    ns = TestNamespace(admin.get());
    for (const char* n : {"trust-node-a", "trust-node-b"}) {
      auto kc = NodeKubeconfig(n);
      ASSERT_TRUE(kc.ok()) << kc.status().ToString();
      auto c = NewClientAs(*kc);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      (n == std::string("trust-node-a") ? node_a : node_b) = std::move(*c);
    }
    ASSERT_TRUE(admin->Create(kube::SandboxTemplateResource(), ns,
                              Json{{"metadata", {{"name", "t"}}},
                                   {"spec", {{"kernel", "/k"}, {"rootfs", "/r"}}}}).ok());
    for (const char* node : {"trust-node-a", "trust-node-b"}) {
      ASSERT_TRUE(admin->Create(kube::SandboxResource(), ns,
                                SandboxManifest(std::string("on-") + node, "t",
                                                {{"kubicle.dev/node", node}})).ok());
    }
    ASSERT_TRUE(admin->Create(kube::SecretResource(), ns,
                              Json{{"metadata", {{"name", "user-secret"}}},
                                   {"stringData", {{"k", "v"}}}}).ok());
  }
  // A node's report of its VM, as SandboxSync writes it.
  Status ReportVm(kube::KubeClient* as, const std::string& sandbox, const Json& status) {
    return as->Patch(kube::SandboxResource(), ns, sandbox, kube::PatchType::kMerge,
                     Json{{"status", status}}, "status").status();
  }
  Json Lease(const std::string& name, const std::string& label, const std::string& holder) {
    return {{"metadata", {{"name", name}, {"labels", {{"kubicle.dev/node", label}}}}},
            {"spec", {{"holderIdentity", holder}, {"leaseDurationSeconds", 40}}}};
  }
  std::unique_ptr<kube::HttpKubeClient> admin, node_a, node_b;
  std::string ns;
};

#define EXPECT_REFUSED(expr)                                                         \
  do {                                                                               \
    Status s_ = (expr);                                                              \
    EXPECT_EQ(s_.code(), StatusCode::kPermissionDenied) << #expr << ": " << s_.ToString(); \
  } while (0)

TEST_F(TrustE2E, ANodeNeverReadsSecretsNorWritesOutsideStatus) {
  EXPECT_REFUSED(node_a->Get(kube::SecretResource(), ns, "user-secret").status());
  EXPECT_REFUSED(node_a->List(kube::SecretResource(), ns, {}).status());
  EXPECT_REFUSED(node_a->Create(kube::SecretResource(), ns,
                                Json{{"metadata", {{"name", "n"}}}, {"stringData", {{"k", "v"}}}}).status());
  EXPECT_REFUSED(node_a->Patch(kube::SandboxResource(), ns, "on-trust-node-a", kube::PatchType::kMerge,
                               Json{{"metadata", {{"labels", {{"kubicle.dev/node", "trust-node-b"}}}}}})
                     .status());
  EXPECT_REFUSED(node_a->Delete(kube::SandboxResource(), ns, "on-trust-node-a"));
  // What it may do: read Sandboxes and templates.
  EXPECT_TRUE(node_a->List(kube::SandboxResource(), ns, {}).ok());
  EXPECT_TRUE(node_a->Get(kube::SandboxTemplateResource(), ns, "t").ok());
}

TEST_F(TrustE2E, ANodeWritesStatusVmOnlyOfItsOwnSandboxes) {
  const Json vm = {{"vm", {{"state", "Running"}, {"endpoint", "127.0.0.1:1"}}}};
  EXPECT_TRUE(ReportVm(node_a.get(), "on-trust-node-a", vm).ok());
  EXPECT_REFUSED(ReportVm(node_a.get(), "on-trust-node-b", vm));
  EXPECT_TRUE(ReportVm(node_b.get(), "on-trust-node-b", vm).ok());
  auto b = admin->Get(kube::SandboxResource(), ns, "on-trust-node-b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(VmState(*b), "Running");
  // Its own Sandbox, but the operator's fields: a node cannot publish a
  // token hash of its choosing or move the phase.
  EXPECT_REFUSED(ReportVm(node_a.get(), "on-trust-node-a", Json{{"tokenSha256", std::string(64, 'a')}}));
  EXPECT_REFUSED(ReportVm(node_a.get(), "on-trust-node-a", Json{{"phase", "Running"}}));
  // The refusal names the rule.
  Status s = ReportVm(node_a.get(), "on-trust-node-b", vm);
  EXPECT_NE(s.message().find("placed on node trust-node-b"), std::string::npos) << s.ToString();
}

TEST_F(TrustE2E, ANodeWritesOnlyItsOwnTemplateEntry) {
  kube::PatchOptions a{"kubicle-node/trust-node-a", true};
  auto entry = [](const std::string& node) {
    return Json{{"nodeName", node}, {"phase", "Ready"}, {"observedGeneration", 1}};
  };
  auto apply = [&](kube::KubeClient* as, const kube::PatchOptions& o, const Json& nodes) {
    Json body = {{"apiVersion", "kubicle.dev/v1alpha1"}, {"kind", "SandboxTemplate"},
                 {"metadata", {{"name", "t"}}}, {"status", {{"nodes", nodes}}}};
    return as->Patch(kube::SandboxTemplateResource(), ns, "t", kube::PatchType::kApply, body, "status", o)
        .status();
  };
  EXPECT_TRUE(apply(node_a.get(), a, Json::array({entry("trust-node-a")})).ok());
  EXPECT_REFUSED(apply(node_a.get(), a, Json::array({entry("trust-node-a"), entry("trust-node-b")})));
  kube::PatchOptions b{"kubicle-node/trust-node-b", true};
  EXPECT_TRUE(apply(node_b.get(), b, Json::array({entry("trust-node-b")})).ok());
  // node-a rewriting node-b's entry through a merge patch of the whole list.
  Json failed_b = entry("trust-node-b");
  failed_b["phase"] = "Failed";
  EXPECT_REFUSED(node_a->Patch(kube::SandboxTemplateResource(), ns, "t", kube::PatchType::kMerge,
                               Json{{"status", {{"nodes", Json::array({entry("trust-node-a"), failed_b})}}}},
                               "status").status());
  EXPECT_REFUSED(node_a->Patch(kube::SandboxTemplateResource(), ns, "t", kube::PatchType::kMerge,
                               Json{{"status", {{"phase", "Ready"}}}}, "status").status());
  auto t = admin->Get(kube::SandboxTemplateResource(), ns, "t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(TemplateNodeEntry(*t, "trust-node-b").value("phase", ""), "Ready");
  EXPECT_EQ(TemplateNodeEntry(*t, "trust-node-a").value("phase", ""), "Ready");
}

TEST_F(TrustE2E, ANodeWritesOnlyItsOwnLease) {
  const auto& leases = kube::LeaseResource();
  (void)admin->Delete(leases, kLeaseNs, "kubicle-node-trust-node-a");
  auto own = node_a->Create(leases, kLeaseNs, Lease("kubicle-node-trust-node-a", "trust-node-a", "trust-node-a"));
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_REFUSED(node_a->Create(leases, kLeaseNs,
                                Lease("kubicle-node-trust-node-b", "trust-node-b", "trust-node-b")).status());
  // Its own Lease relabelled for another node, or held by one.
  EXPECT_REFUSED(node_a->Patch(leases, kLeaseNs, "kubicle-node-trust-node-a", kube::PatchType::kMerge,
                               Json{{"metadata", {{"labels", {{"kubicle.dev/node", "trust-node-b"}}}}}}).status());
  EXPECT_REFUSED(node_a->Patch(leases, kLeaseNs, "kubicle-node-trust-node-a", kube::PatchType::kMerge,
                               Json{{"spec", {{"holderIdentity", "trust-node-b"}}}}).status());
  EXPECT_TRUE(node_a->Patch(leases, kLeaseNs, "kubicle-node-trust-node-a", kube::PatchType::kMerge,
                            Json{{"metadata", {{"annotations", {{"kubicle.dev/capacity-sandboxes", "3"}}}}}})
                  .ok());
  EXPECT_REFUSED(node_a->Delete(leases, kLeaseNs, "kubicle-node-trust-node-a"));
  // Leases elsewhere (the operator's leader Lease) are out of reach.
  EXPECT_REFUSED(node_a->Create(leases, kSystemNs, Lease("kubicle-operator-leader", "x", "x")).status());
  (void)admin->Delete(leases, kLeaseNs, "kubicle-node-trust-node-a");
}

TEST_F(TrustE2E, ANodeWritesStatusDiskOnlyOfItsOwnWorkspaces) {
  const auto& ws = kube::WorkspaceResource();
  for (const char* node : {"trust-node-a", "trust-node-b"}) {
    ASSERT_TRUE(admin->Create(ws, ns, Json{{"metadata", {{"name", std::string("ws-") + node},
                                                         {"labels", {{"kubicle.dev/node", node}}}}},
                                           {"spec", {{"sizeMiB", 64}}}}).ok());
  }
  auto disk = [&](kube::KubeClient* as, const std::string& name, const Json& status) {
    return as->Patch(ws, ns, name, kube::PatchType::kMerge, Json{{"status", status}}, "status").status();
  };
  const Json ready = {{"disk", {{"state", "Ready"}, {"id", "w-x"}, {"bytesUsed", 4096}}}};
  EXPECT_TRUE(disk(node_a.get(), "ws-trust-node-a", ready).ok());
  EXPECT_REFUSED(disk(node_a.get(), "ws-trust-node-b", ready));
  // The operator's fields: no token hash of the node's choosing, no phase.
  EXPECT_REFUSED(disk(node_a.get(), "ws-trust-node-a", Json{{"tokenSha256", std::string(64, 'a')}}));
  EXPECT_REFUSED(disk(node_a.get(), "ws-trust-node-a", Json{{"phase", "Ready"}}));
  // Never the object itself: not its finalizer, not its placement, not a delete.
  EXPECT_REFUSED(node_a->Patch(ws, ns, "ws-trust-node-a", kube::PatchType::kMerge,
                               Json{{"metadata", {{"finalizers", Json::array()}}}}).status());
  EXPECT_REFUSED(node_a->Delete(ws, ns, "ws-trust-node-a"));
  EXPECT_TRUE(node_a->List(ws, ns, {}).ok());
  // The operator: placement and status, never a create or a delete.
  auto kc = OperatorKubeconfig("kubicle-operator-leader");
  ASSERT_TRUE(kc.ok()) << kc.status().ToString();
  auto op = NewClientAs(*kc);
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  EXPECT_TRUE((*op)->Patch(ws, ns, "ws-trust-node-a", kube::PatchType::kMerge,
                           Json{{"status", {{"phase", "Ready"}}}}, "status").ok());
  EXPECT_TRUE((*op)->Patch(ws, ns, "ws-trust-node-a", kube::PatchType::kMerge,
                           Json{{"metadata", {{"finalizers", {"kubicle.dev/workspace-teardown"}}}}}).ok());
  EXPECT_REFUSED((*op)->Delete(ws, ns, "ws-trust-node-a"));
  EXPECT_REFUSED((*op)->Create(ws, ns, Json{{"metadata", {{"name", "op-made"}}}, {"spec", {{"sizeMiB", 8}}}})
                     .status());
  (void)admin->Patch(ws, ns, "ws-trust-node-a", kube::PatchType::kMerge,
                     Json{{"metadata", {{"finalizers", Json::array()}}}});
}

TEST_F(TrustE2E, TheOperatorGetsSecretsByNameButNeverListsOrDeletesThem) {
  auto kc = OperatorKubeconfig("kubicle-operator-leader");
  ASSERT_TRUE(kc.ok()) << kc.status().ToString();
  auto op = NewClientAs(*kc);
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  EXPECT_TRUE((*op)->Get(kube::SecretResource(), ns, "user-secret").ok());
  EXPECT_REFUSED((*op)->List(kube::SecretResource(), ns, {}).status());
  EXPECT_REFUSED((*op)->Delete(kube::SecretResource(), ns, "user-secret"));
  EXPECT_REFUSED((*op)->Patch(kube::SecretResource(), ns, "user-secret", kube::PatchType::kMerge,
                              Json{{"stringData", {{"k", "w"}}}}).status());
  // The node policy does not apply to it: it writes the operator's fields.
  EXPECT_TRUE((*op)->Patch(kube::SandboxResource(), ns, "on-trust-node-a", kube::PatchType::kMerge,
                           Json{{"status", {{"phase", "Scheduled"}}}}, "status").ok());
}

}  // namespace
}  // namespace kubicle::e2e
