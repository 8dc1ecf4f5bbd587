#include "kube/kubeconfig.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kubicle::kube {
namespace {

constexpr const char* kConfig = R"(
apiVersion: v1
kind: Config
current-context: admin
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Q0EtUEVN
users:
- name: admin
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
- name: bot
  user:
    token: abc
contexts:
- name: admin
  context: {cluster: local, user: admin, namespace: team}
- name: bot
  context: {cluster: local, user: bot}
)";

TEST(KubeconfigTest, CurrentContextWithInlineCerts) {
  auto cfg = ParseKubeconfig(kConfig, "/tmp");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://127.0.0.1:6443");
  EXPECT_EQ(cfg->ca_pem, "CA-PEM");
  EXPECT_EQ(cfg->client_cert_pem, "CERT");
  EXPECT_EQ(cfg->client_key_pem, "KEY");
  EXPECT_EQ(cfg->ns, "team");
}

TEST(KubeconfigTest, NamedContextWithToken) {
  auto cfg = ParseKubeconfig(kConfig, "/tmp", "bot");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->bearer_token, "abc");
  EXPECT_EQ(cfg->ns, "default");
  EXPECT_TRUE(cfg->client_cert_pem.empty());
}

TEST(KubeconfigTest, ErrorsAreStatuses) {
  EXPECT_EQ(ParseKubeconfig(kConfig, "/tmp", "nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseKubeconfig("{[", "/tmp").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(LoadKubeconfig("/nonexistent/kubeconfig").ok());
}

TEST(KubeconfigTest, InClusterReadsTheServiceAccount) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "kubicle-sa-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "ca.crt") << "CA";
  std::ofstream(dir / "token") << "tok\n";
  std::ofstream(dir / "namespace") << "kubicle-system";
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(InClusterConfig(dir.string()).status().code(), StatusCode::kFailedPrecondition);
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto cfg = InClusterConfig(dir.string());
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://[fd00::1]:443");
  EXPECT_EQ(cfg->ca_pem, "CA");
  EXPECT_EQ(cfg->bearer_token, "tok\n");
  EXPECT_EQ(cfg->bearer_token_file, (dir / "token").string());
  EXPECT_EQ(cfg->ns, "kubicle-system");
  std::filesystem::remove_all(dir);
}

TEST(KubeconfigTest, FileReferencesResolveAgainstTheKubeconfigDir) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "kubicle-kc-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "ca.pem") << "FILE-CA";
  std::ofstream(dir / "config") << "current-context: c\nclusters: [{name: k, cluster: {server: "
                                   "'https://h:1', certificate-authority: ca.pem}}]\n"
                                   "contexts: [{name: c, context: {cluster: k}}]\n";
  auto cfg = LoadKubeconfig((dir / "config").string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->ca_pem, "FILE-CA");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kubicle::kube
