#include "operator/kube/kubeconfig.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kubicle::kube
