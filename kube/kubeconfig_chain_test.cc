#include "kube/kubeconfig_chain.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kubicle::kube {
namespace {

namespace fs = std::filesystem;

TEST(KubeconfigChain, PathsFollowKubectlsOrder) {
  EXPECT_EQ(KubeconfigPaths("/x/conf", "/a:/b", "/home/u"), std::vector<std::string>{"/x/conf"});
  EXPECT_EQ(KubeconfigPaths("", "/a::/b:/a", "/home/u"), (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(KubeconfigPaths("", "", "/home/u"), std::vector<std::string>{"/home/u/.kube/config"});
}

constexpr char kFirst[] = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c1
  cluster: {server: "https://one:6443", certificate-authority: ca.crt}
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team-a}
users:
- name: u1
  user: {token: first-token}
)";

constexpr char kSecond[] = R"(apiVersion: v1
kind: Config
current-context: other
clusters:
- name: c1
  cluster: {server: "https://shadowed:6443"}
- name: c2
  cluster: {server: "https://two:6443"}
contexts:
- name: dev
  context: {cluster: c2, user: u2}
- name: prod
  context: {cluster: c2, user: u2}
users:
- name: u2
  user: {tokenFile: tok}
)";

TEST(KubeconfigChain, FirstFileWinsAndReferencesStayWithTheirFile) {
  auto merged = MergeKubeconfigs({{kFirst, "/etc/one"}, {kSecond, "/etc/two"}, {"", "/empty"}});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  // current-context and "dev" come from the first file (read in full by
  // the load test below; its CA file is not there to read here).
  EXPECT_NE(merged->find("current-context: dev"), std::string::npos) << *merged;
  EXPECT_NE(merged->find("/etc/one/ca.crt"), std::string::npos) << *merged;
  EXPECT_EQ(merged->find("shadowed"), std::string::npos) << *merged;
  auto prod = ParseKubeconfig(*merged, "", "prod");
  ASSERT_TRUE(prod.ok()) << prod.status().ToString();
  EXPECT_EQ(prod->server, "https://two:6443");
  EXPECT_EQ(prod->ns, "default");
  EXPECT_EQ(prod->bearer_token_file, "/etc/two/tok");
  EXPECT_FALSE(MergeKubeconfigs({{"[1, 2]", "/x"}}).ok());
  EXPECT_FALSE(MergeKubeconfigs({{"{unclosed", "/x"}}).ok());
}

TEST(KubeconfigChain, LoadsFromKubeconfigListSkippingMissingFiles) {
  fs::path dir = fs::temp_directory_path() / ("kcchain-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ca.crt") << "PEM";
  std::ofstream(dir / "one") << kFirst;
  std::ofstream(dir / "two") << kSecond;
  const std::string list = (dir / "missing").string() + ":" + (dir / "one").string() + ":" +
                           (dir / "two").string();
  ::setenv("KUBECONFIG", list.c_str(), 1);
  auto cfg = LoadKubeconfigLikeKubectl("", "");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://one:6443");
  EXPECT_EQ(cfg->ca_pem, "PEM");  // read relative to the first file
  EXPECT_EQ(cfg->ns, "team-a");
  EXPECT_EQ(cfg->bearer_token, "first-token");
  auto explicit_two = LoadKubeconfigLikeKubectl((dir / "two").string(), "prod");
  ASSERT_TRUE(explicit_two.ok()) << explicit_two.status().ToString();
  EXPECT_EQ(explicit_two->server, "https://two:6443");
  EXPECT_EQ(LoadKubeconfigLikeKubectl((dir / "missing").string(), "").status().code(),
            StatusCode::kNotFound);
  ::setenv("KUBECONFIG", (dir / "missing").c_str(), 1);
  EXPECT_EQ(LoadKubeconfigLikeKubectl("", "").status().code(), StatusCode::kNotFound);
  ::unsetenv("KUBECONFIG");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kubicle::kube
